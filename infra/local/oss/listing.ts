// One page of a bucket listing (ListObjects v1 and v2 share it): keys after the marker that start
// with the prefix, keys sharing a delimiter-terminated part rolled up into common prefixes, at
// most maxKeys entries (objects and prefixes together), as OSS pages them.

export interface ListRequest {
  prefix: string;
  /** "" for no delimiter. */
  delimiter: string;
  /** Return only entries after this key (marker, start-after or a continuation token). */
  after: string;
  maxKeys: number;
}

export interface ListPage<T> {
  objects: T[];
  commonPrefixes: string[];
  truncated: boolean;
  /** The last entry of a truncated page: where the next page starts. */
  nextMarker: string | undefined;
}

export function listPage<T extends { key: string }>(
  sortedByKey: readonly T[],
  request: ListRequest,
): ListPage<T> {
  const objects: T[] = [];
  const commonPrefixes: string[] = [];
  let last: string | undefined;
  for (const object of sortedByKey) {
    if (object.key <= request.after || !object.key.startsWith(request.prefix)) continue;
    let entry: { prefix: string } | { object: T } = { object };
    if (request.delimiter !== "") {
      const at = object.key.indexOf(request.delimiter, request.prefix.length);
      if (at >= 0) {
        const prefix = object.key.slice(0, at + request.delimiter.length);
        // A prefix already returned (on this page, or as the marker of the previous one) is not repeated.
        if (prefix === last || prefix <= request.after) continue;
        entry = { prefix };
      }
    }
    if (objects.length + commonPrefixes.length === request.maxKeys) {
      return { objects, commonPrefixes, truncated: true, nextMarker: last };
    }
    if ("prefix" in entry) {
      commonPrefixes.push(entry.prefix);
      last = entry.prefix;
    } else {
      objects.push(entry.object);
      last = entry.object.key;
    }
  }
  return { objects, commonPrefixes, truncated: false, nextMarker: undefined };
}
