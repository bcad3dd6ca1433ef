// Multipart uploads: InitiateMultipartUpload, UploadPart, ListParts, CompleteMultipartUpload,
// AbortMultipartUpload, ListMultipartUploads. Parts are kept as files in the upload's folder;
// completing moves the chosen parts into the bucket as the object's data segments (no copy), after
// checking them the way OSS does: ascending part numbers, ETags that match what was uploaded,
// every part but the last at least 100 KiB.
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { ReceivedBody } from "./body.ts";
import { entityTooSmall, invalidPart, invalidPartOrder, malformedXml, noSuchUpload } from "./errors.ts";
import { newVersion, type ObjectStore, type Segment, type StoredObject } from "./store.ts";

export const MIN_PART_BYTES = 100 * 1024;
export const MAX_PART_NUMBER = 10_000;

export interface UploadRecord {
  uploadId: string;
  key: string;
  initiated: string;
  /** Content-Type and x-oss-meta-* given at initiation: they become the object's. */
  headers: Record<string, string>;
}

export interface PartRecord {
  partNumber: number;
  etag: string;
  size: number;
  lastModified: string;
  /** File name inside the upload's folder. */
  file: string;
  md5Hex: string;
}

export interface RequestedPart {
  partNumber: number;
  etag: string;
}

/** ETags compare without quotes and case: clients echo them back in different shapes. */
const normalizeEtag = (etag: string) =>
  etag.trim().replaceAll('"', "").replaceAll("&quot;", "").toUpperCase();

export const partEtag = (md5: Buffer) => `"${md5.toString("hex").toUpperCase()}"`;

export class MultipartUploads {
  readonly #store: ObjectStore;

  constructor(store: ObjectStore) {
    this.#store = store;
  }

  #dir(bucket: string, uploadId: string): string {
    return join(this.#store.uploadsDir(bucket), uploadId);
  }

  async initiate(bucket: string, key: string, headers: Record<string, string>): Promise<UploadRecord> {
    await this.#store.bucket(bucket);
    const upload: UploadRecord = {
      uploadId: randomBytes(16).toString("hex").toUpperCase(),
      key,
      initiated: new Date().toISOString(),
      headers,
    };
    await mkdir(this.#dir(bucket, upload.uploadId));
    await this.#store.writeJsonAtomically(join(this.#dir(bucket, upload.uploadId), "upload.json"), upload);
    return upload;
  }

  async #upload(bucket: string, key: string, uploadId: string): Promise<UploadRecord> {
    await this.#store.bucket(bucket);
    if (!/^[0-9A-F]{32}$/.test(uploadId)) throw noSuchUpload(uploadId);
    let upload: UploadRecord;
    try {
      upload = JSON.parse(await readFile(join(this.#dir(bucket, uploadId), "upload.json"), "utf8"));
    } catch (error) {
      throw Object.assign(noSuchUpload(uploadId), { cause: error });
    }
    // An upload id belongs to one key; used with another it does not exist.
    if (upload.key !== key) throw noSuchUpload(uploadId);
    return upload;
  }

  /** The upload, or NoSuchUpload (also when the id belongs to another key). */
  get(bucket: string, key: string, uploadId: string): Promise<UploadRecord> {
    return this.#upload(bucket, key, uploadId);
  }

  async #parts(bucket: string, uploadId: string): Promise<PartRecord[]> {
    const dir = this.#dir(bucket, uploadId);
    const files = (await readdir(dir)).filter((file) => /^part\.\d+\.json$/.test(file));
    const parts = await Promise.all(
      files.map(async (file): Promise<PartRecord> => JSON.parse(await readFile(join(dir, file), "utf8"))),
    );
    return parts.sort((a, b) => a.partNumber - b.partNumber);
  }

  #lock<T>(bucket: string, uploadId: string, section: () => Promise<T>): Promise<T> {
    return this.#store.locks.run(`upload:${bucket}/${uploadId}`, section);
  }

  async uploadPart(
    bucket: string,
    key: string,
    uploadId: string,
    partNumber: number,
    body: ReceivedBody,
  ): Promise<PartRecord> {
    return this.#lock(bucket, uploadId, async () => {
      try {
        await this.#upload(bucket, key, uploadId);
      } catch (error) {
        await rm(body.path, { force: true });
        throw error;
      }
      const dir = this.#dir(bucket, uploadId);
      const part: PartRecord = {
        partNumber,
        etag: partEtag(body.md5),
        size: body.size,
        lastModified: new Date().toISOString(),
        file: `part.${partNumber}.${newVersion()}.data`,
        md5Hex: body.md5.toString("hex"),
      };
      const previous = (await this.#parts(bucket, uploadId)).find((p) => p.partNumber === partNumber);
      await rename(body.path, join(dir, part.file));
      await this.#store.writeJsonAtomically(join(dir, `part.${partNumber}.json`), part);
      // Uploading a part number again replaces it.
      if (previous !== undefined) await rm(join(dir, previous.file), { force: true });
      return part;
    });
  }

  async listParts(
    bucket: string,
    key: string,
    uploadId: string,
  ): Promise<{ upload: UploadRecord; parts: PartRecord[] }> {
    return this.#lock(bucket, uploadId, async () => {
      const upload = await this.#upload(bucket, key, uploadId);
      return { upload, parts: await this.#parts(bucket, uploadId) };
    });
  }

  async complete(
    bucket: string,
    key: string,
    uploadId: string,
    requested: readonly RequestedPart[],
  ): Promise<StoredObject> {
    return this.#lock(bucket, uploadId, async () => {
      const upload = await this.#upload(bucket, key, uploadId);
      if (requested.length === 0) throw malformedXml();
      const uploaded = new Map((await this.#parts(bucket, uploadId)).map((part) => [part.partNumber, part]));
      const chosen: PartRecord[] = [];
      for (const [index, wanted] of requested.entries()) {
        const before = requested[index - 1];
        if (before !== undefined && wanted.partNumber <= before.partNumber) throw invalidPartOrder();
        const part = uploaded.get(wanted.partNumber);
        if (part === undefined || normalizeEtag(part.etag) !== normalizeEtag(wanted.etag)) {
          throw invalidPart(wanted.partNumber, wanted.etag);
        }
        if (index < requested.length - 1 && part.size < MIN_PART_BYTES) {
          throw entityTooSmall(part.partNumber, part.size, MIN_PART_BYTES);
        }
        chosen.push(part);
      }
      const version = newVersion();
      const dir = this.#dir(bucket, uploadId);
      const segments: Segment[] = [];
      for (const [index, part] of chosen.entries()) {
        segments.push(
          await this.#store.adoptFile(bucket, key, join(dir, part.file), version, index, part.size),
        );
      }
      const combined = createHash("md5");
      for (const part of chosen) combined.update(Buffer.from(part.md5Hex, "hex"));
      const object: StoredObject = {
        key,
        size: chosen.reduce((sum, part) => sum + part.size, 0),
        etag: `"${combined.digest("hex").toUpperCase()}-${chosen.length}"`,
        contentMd5: undefined,
        lastModified: new Date().toISOString(),
        type: "Multipart",
        headers: upload.headers,
        segments,
      };
      await this.#store.commit(bucket, object);
      // Parts uploaded but not listed in the request are discarded with the upload.
      await rm(dir, { recursive: true, force: true });
      return object;
    });
  }

  async abort(bucket: string, key: string, uploadId: string): Promise<void> {
    await this.#lock(bucket, uploadId, async () => {
      await this.#upload(bucket, key, uploadId);
      await rm(this.#dir(bucket, uploadId), { recursive: true, force: true });
    });
  }

  /** Uploads in progress, by key then initiation time. */
  async list(bucket: string): Promise<UploadRecord[]> {
    await this.#store.bucket(bucket);
    const ids = await readdir(this.#store.uploadsDir(bucket));
    const uploads = await Promise.all(
      ids.map(async (uploadId) => {
        try {
          const upload: UploadRecord = JSON.parse(
            await readFile(join(this.#dir(bucket, uploadId), "upload.json"), "utf8"),
          );
          return upload;
        } catch {
          return undefined; // completed or aborted meanwhile
        }
      }),
    );
    return uploads
      .filter((upload) => upload !== undefined)
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : a.initiated < b.initiated ? -1 : 1));
  }
}
