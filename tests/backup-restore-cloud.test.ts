// End-to-end: the backup suite for Azure Blob Storage and Google Cloud Storage, as for S3 and OSS
// (tests/backup-restore.test.ts), against Azurite (Microsoft's Azure Storage server, which checks
// Shared Key signatures) and fake-gcs-server (GCS's JSON and upload APIs; it checks no credentials).
// Real Azure and GCS cannot run here; docs/local-control-plane.md says what these servers do not
// check. For each store: 10,000 keys backed up and restored after the cluster was deleted; a
// periodic policy keeps exactly the newest maxBackups; bad input (wrong or malformed credentials,
// a missing container or bucket, an unreachable endpoint) fails the backup with a clear status and
// Event and writes nothing; a blob that is no snapshot, a truncated and a corrupt one are refused by
// a restore that touches nothing; every member lost, the cluster comes back from its newest backup.
import { createHash, randomBytes } from "node:crypto";
import { join } from "node:path";
import { BlobServiceClient, StorageSharedKeyCredential } from "@azure/storage-blob";
import t from "tap";
import { startAzurite } from "../infra/local/azurite.ts";
import { startFakeGcs } from "../infra/local/fake-gcs.ts";
import { newestPatchOf } from "../shared/etcd-versions.ts";
import { openAbsStore } from "../shared/object-store/abs.ts";
import { openGcsStore } from "../shared/object-store/gcs.ts";
import {
  type BackupTestContext,
  type BadBackup,
  badBackupsFail,
  bytesOf,
  everyMemberLostRestored,
  keysUnder,
  periodicKeepsNewest,
  refusedRestoresTouchNothing,
  roundTrip,
  type SuiteStore,
  under,
} from "./helpers/backup-suite.ts";
import { createSecret, startClusterWithStore } from "./helpers/backups.ts";
import { type OperatorProcess, startOperatorProcess } from "./helpers/operator-processes.ts";

const NS = "default";
const KEYS = 10_000;
const BUCKET = "backups";

const { local: cluster, clients: c } = await startClusterWithStore(
  { name: "e2e-cloud", bucket: "unused" },
  (stop) => t.teardown(stop),
);
const ctx: BackupTestContext = { c, ns: NS, keys: KEYS, version: newestPatchOf("3.6") ?? "" };
const host = cluster.network.gateway;
const unreachable = `http://${host}:1`;

const azurite = await startAzurite({ dir: join(cluster.dir, "azurite"), host });
t.teardown(() => azurite.stop());
await new BlobServiceClient(azurite.endpoint, new StorageSharedKeyCredential(azurite.account, azurite.key))
  .getContainerClient(BUCKET)
  .create();
const absSecret = (key: string, endpoint = azurite.endpoint) => ({
  "storage-account": azurite.account,
  "storage-key": key,
  "storage-endpoint": endpoint,
});
await createSecret(c, NS, "abs", absSecret(azurite.key));
await createSecret(c, NS, "abs-wrong-key", absSecret(randomBytes(64).toString("base64")));
await createSecret(c, NS, "abs-unreachable", absSecret(azurite.key, `${unreachable}/${azurite.account}`));

const gcs = await startFakeGcs({ dir: join(cluster.dir, "fake-gcs"), host });
t.teardown(() => gcs.stop());
await gcs.createBucket(BUCKET);
await createSecret(c, NS, "gcs", { "access-token": `ya29.${randomBytes(24).toString("base64url")}` });
await createSecret(c, NS, "gcs-malformed", { "credentials.json": '{"type": "authorized_user"}' });

// The operator image name maps to this checkout in the process kubelet (restore init containers).
const processes: OperatorProcess[] = [
  startOperatorProcess(cluster, "all", { OPERATOR_IMAGE: "localhost/etcd-operator:dev" }),
];
t.teardown(async () => {
  for (const p of processes) await p.kill("SIGKILL");
});

interface CloudStore extends SuiteStore {
  label: string;
  /** The round trip's cluster: 3 members restored beside the serving ones, or 1 kept apart (in place). */
  size: number;
  pod?: object;
  bad: BadBackup[];
}

const stores: CloudStore[] = [
  {
    label: "Azure Blob Storage",
    sectionName: "abs",
    storageType: "ABS",
    section: (path) => ({ path: `${BUCKET}/${path}`, absSecret: "abs" }),
    store: openAbsStore({
      container: BUCKET,
      credentials: { account: azurite.account, key: azurite.key, endpoint: azurite.endpoint },
    }),
    size: 3,
    bad: [
      {
        name: "abs-wrong-key",
        spec: { storageType: "ABS", abs: { path: `${BUCKET}/bad/x`, absSecret: "abs-wrong-key" } },
        reason: "InvalidCredentials",
        message: /refused the credentials/,
      },
      {
        name: "abs-missing-container",
        spec: { storageType: "ABS", abs: { path: "no-such-container/x", absSecret: "abs" } },
        reason: "NoSuchBucket",
        message: /container does not exist/,
      },
      {
        name: "abs-unreachable",
        spec: { storageType: "ABS", abs: { path: `${BUCKET}/bad/x`, absSecret: "abs-unreachable" } },
        reason: "Unreachable",
        message: /unreachable/,
      },
    ],
  },
  {
    label: "Google Cloud Storage",
    sectionName: "gcs",
    storageType: "GCS",
    section: (path) => ({ path: `${BUCKET}/${path}`, gcpSecret: "gcs", endpoint: gcs.endpoint }),
    store: openGcsStore({
      bucket: BUCKET,
      credentials: { kind: "access-token", token: "test" },
      endpoint: gcs.endpoint,
    }),
    size: 1,
    pod: { antiAffinity: true },
    bad: [
      {
        name: "gcs-malformed-secret",
        spec: {
          storageType: "GCS",
          gcs: { path: `${BUCKET}/bad/x`, gcpSecret: "gcs-malformed", endpoint: gcs.endpoint },
        },
        reason: "InvalidCredentials",
        message: /must be a service account key/,
      },
      {
        name: "gcs-missing-bucket",
        spec: {
          storageType: "GCS",
          gcs: { path: "no-such-bucket/x", gcpSecret: "gcs", endpoint: gcs.endpoint },
        },
        reason: "NoSuchBucket",
        message: /bucket does not exist/,
      },
      {
        name: "gcs-unreachable",
        spec: {
          storageType: "GCS",
          gcs: { path: `${BUCKET}/bad/x`, gcpSecret: "gcs", endpoint: unreachable },
        },
        reason: "Unreachable",
        message: /unreachable/,
      },
    ],
  },
];
t.teardown(() => {
  for (const s of stores) s.store.close();
});

for (const s of stores) {
  const name = `${s.sectionName}-alpha`;
  t.test(`${s.label}: 10,000 keys backed up, the cluster deleted, restored`, async (t) => {
    await roundTrip(ctx, t, name, s.size, under(s, `${name}/etcd.backup`), s.pod);
    t.same(
      await keysUnder(s.store, `${name}/`),
      [`${name}/etcd.backup`, `${name}/etcd.backup.meta.json`],
      "the backup and its metadata file",
    );
    const meta = JSON.parse((await bytesOf(s.store, `${name}/etcd.backup.meta.json`)).toString()) as {
      sha256: string;
    };
    const object = await bytesOf(s.store, `${name}/etcd.backup`);
    t.equal(meta.sha256, createHash("sha256").update(object).digest("hex"), "the stored SHA-256 matches");
  });
  t.test(`${s.label}: a periodic backup with maxBackups 3 keeps exactly the 3 newest`, (t) =>
    periodicKeepsNewest(ctx, t, s, `${s.sectionName}-periodic`),
  );
  t.test(`${s.label}: bad input fails the backup clearly and writes nothing`, (t) =>
    badBackupsFail(ctx, t, s.bad, `http://${name}-client:2379`, s.store),
  );
  t.test(`${s.label}: a corrupt, truncated or foreign blob is refused and the cluster untouched`, (t) =>
    refusedRestoresTouchNothing(ctx, t, s, name, s.pod !== undefined),
  );
  t.test(`${s.label}: every member lost, the cluster comes back from its newest backup`, (t) =>
    everyMemberLostRestored(ctx, t, name, s.size),
  );
}
