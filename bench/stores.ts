// The object stores the backup bench can write to: the local cluster's S3 store (versitygw),
// Azurite for Azure Blob Storage, fake-gcs-server for Google Cloud Storage, each on the cluster's
// bridge gateway where the restore's pods reach it. Each comes with the Secret an EtcdBackup names,
// the section that points at it, and the store opened with the bench's own credentials.
import { join } from "node:path";
import { BlobServiceClient, StorageSharedKeyCredential } from "@azure/storage-blob";
import { startAzurite } from "../infra/local/azurite.ts";
import type { LocalCluster } from "../infra/local/control-plane.ts";
import { startFakeGcs } from "../infra/local/fake-gcs.ts";
import { openAbsStore } from "../shared/object-store/abs.ts";
import { openGcsStore } from "../shared/object-store/gcs.ts";
import { openS3Store } from "../shared/object-store/s3.ts";
import type { ObjectStore } from "../shared/object-store/types.ts";
import { awsSecretData, createSecret } from "../tests/helpers/backups.ts";
import type { ClusterClients } from "../tests/helpers/clusters.ts";

export const BENCH_STORES = ["s3", "abs", "gcs"] as const;
export type BenchStoreKind = (typeof BENCH_STORES)[number];

export interface BenchStore {
  kind: BenchStoreKind;
  /** The store server's process, for its CPU figures. */
  pid: number;
  /** The EtcdBackup or EtcdRestore fields that name `key` in this store (storage type and section). */
  spec(key: string): Record<string, unknown>;
  store: ObjectStore;
  stop(): Promise<void>;
}

export function isBenchStore(value: string): value is BenchStoreKind {
  return (BENCH_STORES as readonly string[]).includes(value);
}

/** Starts (or, for S3, takes the cluster's) store with a bucket named `bucket` and its Secret. */
export async function benchStore(
  kind: BenchStoreKind,
  cluster: LocalCluster,
  c: ClusterClients,
  bucket: string,
): Promise<BenchStore> {
  const host = cluster.network.gateway;
  if (kind === "abs") {
    const azurite = await startAzurite({ dir: join(cluster.dir, "azurite"), host });
    const credential = new StorageSharedKeyCredential(azurite.account, azurite.key);
    await new BlobServiceClient(azurite.endpoint, credential).getContainerClient(bucket).create();
    await createSecret(c, "default", "azure", {
      "storage-account": azurite.account,
      "storage-key": azurite.key,
      "storage-endpoint": azurite.endpoint,
    });
    return {
      kind,
      pid: azurite.pid,
      spec: (key) => ({ storageType: "ABS", abs: { path: `${bucket}/${key}`, absSecret: "azure" } }),
      store: openAbsStore({
        container: bucket,
        credentials: { account: azurite.account, key: azurite.key, endpoint: azurite.endpoint },
      }),
      stop: azurite.stop,
    };
  }
  if (kind === "gcs") {
    const gcs = await startFakeGcs({ dir: join(cluster.dir, "fake-gcs"), host });
    await gcs.createBucket(bucket);
    await createSecret(c, "default", "gcp", { "access-token": "bench" });
    return {
      kind,
      pid: gcs.pid,
      spec: (key) => ({
        storageType: "GCS",
        gcs: { path: `${bucket}/${key}`, gcpSecret: "gcp", endpoint: gcs.endpoint },
      }),
      store: openGcsStore({
        bucket,
        credentials: { kind: "access-token", token: "bench" },
        endpoint: gcs.endpoint,
      }),
      stop: gcs.stop,
    };
  }
  const s3 = cluster.s3;
  if (!s3) throw new Error("the local cluster started without its S3 store");
  await s3.createBucket(bucket);
  await createSecret(c, "default", "aws", awsSecretData(s3));
  return {
    kind,
    pid: s3.pid,
    spec: (key) => ({
      storageType: "S3",
      s3: { path: `${bucket}/${key}`, awsSecret: "aws", endpoint: s3.endpoint, forcePathStyle: true },
    }),
    store: openS3Store({
      bucket,
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey, region: s3.region },
    }),
    stop: async () => {},
  };
}
