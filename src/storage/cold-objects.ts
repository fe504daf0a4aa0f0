/**
 * The cold tier's object store (docs/storage.md "Cold tier"): a flat namespace of immutable
 * objects named by `/`-separated keys, the smallest interface both a directory and an
 * S3-compatible bucket can honour. Storage (`cold-store.ts`) decides what goes where; an
 * implementation only moves bytes, and proves it moved them:
 *
 * - `put` resolves only once the store holds exactly the bytes given: their size and checksum
 *   were read back from the store and compared (an S3 ETag of the MD5, or the bytes themselves
 *   re-read), never taken on trust. A store that acknowledged a short or corrupt object is
 *   retried; `put` never resolves for an object that is not whole. A failed `put` may leave a
 *   partial or wrong object under the key (S3 has no rename): callers treat an object nothing
 *   references as garbage.
 * - `get` answers exactly the bytes asked for or throws; a short answer is an error.
 * - `list` is complete (every page followed) or throws; it never answers half a listing.
 * - `delete` of a missing object succeeds.
 *
 * Errors are {@link ColdStoreError}s whose `kind` says whether waiting helps. Implementations:
 * `DirectoryColdStore` (`cold-dir-store.ts`, over the FileSystem), `S3ColdStore`
 * (`src/runtime/s3-cold-store.ts`, over fetch), and the tests' `MemoryColdStore`; one conformance
 * suite (`test/cold/conformance.ts`) runs against each.
 */

/**
 * Why an operation failed:
 * - `not_found`: no object under that key (get only).
 * - `access_denied`: the store refused the credentials or the request (HTTP 403): retrying helps only once someone fixes them.
 * - `no_bucket`: the bucket (or directory root) does not exist.
 * - `unavailable`: the store could not be reached or kept failing (5xx, throttling, timeouts, resets) after its own retries.
 * - `corrupt`: what the store holds or answered is not what was written (size or checksum).
 * - `invalid`: the caller asked for something malformed (a bad key or range).
 */
export type ColdStoreErrorKind =
  | "not_found"
  | "access_denied"
  | "no_bucket"
  | "unavailable"
  | "corrupt"
  | "invalid";

/** An operating error of a {@link ColdStore}, with a message naming the store, the key and the action. */
export class ColdStoreError extends Error {
  override name = "ColdStoreError";
  constructor(
    readonly kind: ColdStoreErrorKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** True if `err` is a {@link ColdStoreError} (of `kind`, if given). */
export function isColdStoreError(err: unknown, kind?: ColdStoreErrorKind): err is ColdStoreError {
  return err instanceof ColdStoreError && (kind === undefined || err.kind === kind);
}

/** One stored object, as a listing or a put reports it. */
export interface ColdObjectInfo {
  key: string;
  sizeBytes: number;
}

/**
 * Bytes to upload, read on demand so a large segment never has to fit in memory: `read` fills
 * `[position, position + length)` (the caller never asks past `sizeBytes`). It may be called more
 * than once for the same range (a retried part) and must answer the same bytes.
 */
export interface ColdObjectSource {
  readonly sizeBytes: number;
  read(position: number, length: number): Promise<Uint8Array>;
}

/** A source over bytes already in memory. */
export function bytesSource(bytes: Uint8Array): ColdObjectSource {
  return {
    sizeBytes: bytes.length,
    read: async (position, length) => bytes.subarray(position, position + length),
  };
}

/** The object store under the cold tier. See the module comment for each method's contract. */
export interface ColdStore {
  /** Where the objects live, for logs and `GET /v1/admin/storage` (`s3://bucket/prefix`, a directory); never holds a secret. */
  readonly location: string;
  /**
   * Stores `source` under `key` (replacing any object there) and verifies it.
   * @returns the stored object.
   * @throws ColdStoreError (the key may then hold garbage; see the module comment).
   */
  put(key: string, source: ColdObjectSource): Promise<ColdObjectInfo>;
  /**
   * Bytes `[range.start, range.end)` of the object (the whole object without `range`).
   * @throws ColdStoreError `not_found`, `corrupt` (a short answer), and the rest.
   */
  get(key: string, range?: { start: number; end: number }): Promise<Uint8Array>;
  /** Every object whose key starts with `prefix`, in key order. @throws ColdStoreError. */
  list(prefix: string): Promise<ColdObjectInfo[]>;
  /** Removes an object; a missing one is not an error. @throws ColdStoreError. */
  delete(key: string): Promise<void>;
  /**
   * Optional: removes what is left of a prefix once its objects are deleted (a directory store's
   * empty directories); a prefix still holding objects keeps them. @throws ColdStoreError.
   */
  prune?(prefix: string): Promise<void>;
  /**
   * Optional: abandons every request in flight and refuses later ones at once (ColdStoreError
   * `unavailable`): the broker is shutting down, and nothing a cold-tier operation left half done
   * is lost (an offload keeps its local segment; docs/operations.md "Cold tier unavailable").
   */
  abort?(): void;
}

/** True if `key` is a key every store accepts: `/`-separated non-empty parts, none `.` or `..`, no NUL. */
export function isValidObjectKey(key: string): boolean {
  if (key.length === 0 || key.length > 1024 || key.includes("\0")) return false;
  return key.split("/").every((part) => part !== "" && part !== "." && part !== "..");
}
