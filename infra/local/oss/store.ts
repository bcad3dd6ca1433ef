// The filesystem behind the server. Every object is a JSON record plus its data file(s):
//
//   <root>/tmp/                                  bodies being received (same filesystem: renames are atomic)
//   <root>/buckets/<bucket>/bucket.json
//   <root>/buckets/<bucket>/objects/<h>.json     the record; <h> = sha256(key), keys can be 1023 bytes
//   <root>/buckets/<bucket>/objects/<h>.<version>.<n>.data   data segments (one for PutObject, one
//                                                per part for a completed multipart upload, so
//                                                completing never copies GiBs)
//   <root>/buckets/<bucket>/uploads/<uploadId>/  multipart uploads in progress (multipart.ts)
//
// A write lands in a new data file and becomes visible with one atomic rename of the record; the
// old data is unlinked only when no reader still streams it, so a GET racing with an overwrite or
// a delete always returns one whole version.
import { createHash, randomBytes } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { bucketNotEmpty, noSuchBucket, noSuchKey } from "./errors.ts";

export interface Segment {
  /** File name inside the bucket's objects directory. */
  file: string;
  size: number;
}

export interface StoredObject {
  key: string;
  size: number;
  /** As OSS returns it: quoted upper-case hex MD5, or `"<md5 of part md5s>-<parts>"` for multipart. */
  etag: string;
  /** base64 MD5 of the whole object; OSS sends Content-MD5 only for objects uploaded in one piece. */
  contentMd5: string | undefined;
  lastModified: string;
  type: "Normal" | "Multipart";
  /** Content-Type, Cache-Control, ..., and the x-oss-meta-* user metadata, lower-case names. */
  headers: Record<string, string>;
  segments: Segment[];
}

export interface BucketRecord {
  name: string;
  creationDate: string;
  storageClass: string;
}

export interface OpenedObject {
  object: StoredObject;
  /** Absolute paths of the data segments, in order. */
  paths: string[];
  /** Must be called when done reading: lets a replaced version's files go. */
  release(): void;
}

function isNotFound(error: unknown): boolean {
  return error instanceof Error && "code" in error && error.code === "ENOENT";
}

/** Runs async sections one at a time per key (in this process, which is the only writer). */
export class KeyedLock {
  #tails = new Map<string, Promise<unknown>>();

  async run<T>(key: string, section: () => Promise<T>): Promise<T> {
    const previous = this.#tails.get(key) ?? Promise.resolve();
    const current = previous.then(section, section);
    const tail = current.catch(() => undefined);
    this.#tails.set(key, tail);
    try {
      return await current;
    } finally {
      if (this.#tails.get(key) === tail) this.#tails.delete(key);
    }
  }
}

export function newVersion(): string {
  return randomBytes(8).toString("hex");
}

export class ObjectStore {
  readonly root: string;
  readonly locks = new KeyedLock();
  /** Open readers per data file, and files waiting for their last reader to unlink them. */
  #readers = new Map<string, number>();
  #retired = new Set<string>();

  constructor(root: string) {
    this.root = root;
  }

  /** Creates the layout and drops bodies a previous run left half-received. */
  async init(): Promise<void> {
    await rm(join(this.root, "tmp"), { recursive: true, force: true });
    await mkdir(join(this.root, "tmp"), { recursive: true });
    await mkdir(join(this.root, "buckets"), { recursive: true });
  }

  tempPath(): string {
    return join(this.root, "tmp", `${newVersion()}${newVersion()}`);
  }

  bucketDir(bucket: string): string {
    return join(this.root, "buckets", bucket);
  }

  objectsDir(bucket: string): string {
    return join(this.bucketDir(bucket), "objects");
  }

  uploadsDir(bucket: string): string {
    return join(this.bucketDir(bucket), "uploads");
  }

  static keyHash(key: string): string {
    return createHash("sha256").update(key, "utf8").digest("hex");
  }

  /** Writes JSON next to its destination and renames it into place, so readers see all or nothing. */
  async writeJsonAtomically(path: string, value: unknown): Promise<void> {
    const temp = this.tempPath();
    await writeFile(temp, JSON.stringify(value), { flag: "wx" });
    await rename(temp, path);
  }

  // --- buckets ----------------------------------------------------------------------------------

  /** Creates the bucket if it does not exist; answers with its record either way. */
  async createBucket(name: string, storageClass = "Standard"): Promise<BucketRecord> {
    return this.locks.run(`bucket:${name}`, async () => {
      const existing = await this.findBucket(name);
      if (existing !== undefined) return existing;
      await mkdir(this.objectsDir(name), { recursive: true });
      await mkdir(this.uploadsDir(name), { recursive: true });
      const record: BucketRecord = { name, creationDate: new Date().toISOString(), storageClass };
      await this.writeJsonAtomically(join(this.bucketDir(name), "bucket.json"), record);
      return record;
    });
  }

  async findBucket(name: string): Promise<BucketRecord | undefined> {
    try {
      const parsed: BucketRecord = JSON.parse(
        await readFile(join(this.bucketDir(name), "bucket.json"), "utf8"),
      );
      return parsed;
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw new Error(`could not read the record of bucket ${name}`, { cause: error });
    }
  }

  async bucket(name: string): Promise<BucketRecord> {
    const record = await this.findBucket(name);
    if (record === undefined) throw noSuchBucket(name);
    return record;
  }

  async listBuckets(): Promise<BucketRecord[]> {
    const names = await readdir(join(this.root, "buckets"));
    const records = await Promise.all(names.map((name) => this.findBucket(name)));
    return records.filter((record) => record !== undefined).sort((a, b) => (a.name < b.name ? -1 : 1));
  }

  async deleteBucket(name: string): Promise<void> {
    await this.locks.run(`bucket:${name}`, async () => {
      await this.bucket(name);
      const [objects, uploads] = await Promise.all([
        readdir(this.objectsDir(name)),
        readdir(this.uploadsDir(name)),
      ]);
      if (objects.some((file) => file.endsWith(".json")) || uploads.length > 0) throw bucketNotEmpty(name);
      await rm(this.bucketDir(name), { recursive: true, force: true });
    });
  }

  // --- objects ----------------------------------------------------------------------------------

  async #readRecord(bucket: string, key: string): Promise<StoredObject | undefined> {
    try {
      const parsed: StoredObject = JSON.parse(
        await readFile(join(this.objectsDir(bucket), `${ObjectStore.keyHash(key)}.json`), "utf8"),
      );
      return parsed;
    } catch (error) {
      if (isNotFound(error)) return undefined;
      throw new Error(`could not read the record of ${bucket}/${key}`, { cause: error });
    }
  }

  /** Unlinks data files now, or when their last reader is done. */
  async #retire(bucket: string, segments: readonly Segment[]): Promise<void> {
    for (const segment of segments) {
      const path = join(this.objectsDir(bucket), segment.file);
      if ((this.#readers.get(path) ?? 0) > 0) this.#retired.add(path);
      else await rm(path, { force: true });
    }
  }

  /**
   * Moves a received file into the bucket as segment `index` of a new version of `key`.
   * Answers with the segment to put in the record.
   */
  async adoptFile(bucket: string, key: string, from: string, version: string, index: number, size: number) {
    const file = `${ObjectStore.keyHash(key)}.${version}.${index}.data`;
    try {
      await rename(from, join(this.objectsDir(bucket), file));
    } catch (error) {
      await rm(from, { force: true });
      if (isNotFound(error) && (await this.findBucket(bucket)) === undefined) throw noSuchBucket(bucket);
      throw new Error(`could not store data of ${bucket}/${key}`, { cause: error });
    }
    const segment: Segment = { file, size };
    return segment;
  }

  /** Makes `object` the current version of its key; the previous version's data is retired. */
  async commit(bucket: string, object: StoredObject): Promise<StoredObject> {
    return this.locks.run(`object:${bucket}/${object.key}`, async () => {
      const previous = await this.#readRecord(bucket, object.key);
      try {
        await this.writeJsonAtomically(
          join(this.objectsDir(bucket), `${ObjectStore.keyHash(object.key)}.json`),
          object,
        );
      } catch (error) {
        await this.#retire(bucket, object.segments);
        if (isNotFound(error) && (await this.findBucket(bucket)) === undefined) throw noSuchBucket(bucket);
        throw new Error(`could not commit ${bucket}/${object.key}`, { cause: error });
      }
      if (previous !== undefined) await this.#retire(bucket, previous.segments);
      return object;
    });
  }

  async stat(bucket: string, key: string): Promise<StoredObject> {
    const record = await this.#readRecord(bucket, key);
    if (record === undefined) throw noSuchKey(key);
    return record;
  }

  /** The current version of `key`, its data pinned until release(). */
  async open(bucket: string, key: string): Promise<OpenedObject> {
    return this.locks.run(`object:${bucket}/${key}`, async () => {
      const object = await this.stat(bucket, key);
      const paths = object.segments.map((segment) => join(this.objectsDir(bucket), segment.file));
      for (const path of paths) this.#readers.set(path, (this.#readers.get(path) ?? 0) + 1);
      let released = false;
      const release = () => {
        if (released) return;
        released = true;
        for (const path of paths) {
          const left = (this.#readers.get(path) ?? 1) - 1;
          if (left > 0) {
            this.#readers.set(path, left);
            continue;
          }
          this.#readers.delete(path);
          if (this.#retired.delete(path)) void unlink(path).catch(() => undefined);
        }
      };
      return { object, paths, release };
    });
  }

  /** Deletes `key` if it exists (OSS answers 204 either way). Answers whether it existed. */
  async delete(bucket: string, key: string): Promise<boolean> {
    return this.locks.run(`object:${bucket}/${key}`, async () => {
      const record = await this.#readRecord(bucket, key);
      if (record === undefined) return false;
      await rm(join(this.objectsDir(bucket), `${ObjectStore.keyHash(key)}.json`), { force: true });
      await this.#retire(bucket, record.segments);
      return true;
    });
  }

  /**
   * Every object of the bucket, sorted by key. JS string order (UTF-16 code units) equals the UTF-8
   * byte order OSS lists in, except for characters beyond U+FFFF against U+E000–U+FFFF.
   */
  async list(bucket: string): Promise<StoredObject[]> {
    const dir = this.objectsDir(bucket);
    const files = (await readdir(dir)).filter((file) => file.endsWith(".json"));
    const records = await Promise.all(
      files.map(async (file) => {
        try {
          const parsed: StoredObject = JSON.parse(await readFile(join(dir, file), "utf8"));
          return parsed;
        } catch (error) {
          // Deleted between readdir and read: it is simply not part of this listing.
          if (isNotFound(error)) return undefined;
          throw new Error(`could not read ${join(dir, file)}`, { cause: error });
        }
      }),
    );
    return records
      .filter((record) => record !== undefined)
      .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }
}
