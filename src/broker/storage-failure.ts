/**
 * How a failed file-system step of a broker operation (creating or deleting a topic, rewriting a
 * metadata file, appending) reaches a client: as one row of the error table, with a message naming
 * the failed action first and the file-system error after a colon.
 *
 * | the error, or an error in its `cause` chain, is          | row             | retriable |
 * |----------------------------------------------------------|-----------------|-----------|
 * | a BrokerError                                            | its own         | its own   |
 * | an FsError with a code in {@link retriableFsCodes} (ENOSPC, EIO, …) | `storage_error` (507) | yes |
 * | a ColdStoreError other than `invalid` (the cold tier's store unreachable, refusing, corrupt) | `storage_error` (507) | yes |
 * | anything else (ENAMETOOLONG, EACCES, EROFS, EEXIST, ENOTDIR, a plain Error) | `internal` (500) | no |
 *
 * `storage_error` promises that retrying may help (the disk may have room later); a name too
 * long, a permission or a read-only file system will fail the same way every time, and mostly
 * point at a bug or a misconfigured data directory, so they are `internal`, with the detail in
 * the message.
 */
import { FsError } from "../fs/types.ts";
import { errorMessage } from "../lib/errors.ts";
import { StorageError } from "../storage/errors.ts";
import { ColdStoreError } from "../storage/cold-objects.ts";
import { BrokerError, Errors, type ErrorKind } from "./errors.ts";

/** errno codes of failures that can pass: a full disk or quota, an I/O error, a busy or exhausted resource. */
export const retriableFsCodes: ReadonlySet<string> = new Set([
  "ENOSPC",
  "EDQUOT",
  "EIO",
  "EAGAIN",
  "EBUSY",
  "EMFILE",
  "ENFILE",
  "ENOMEM",
  "EINTR",
]);

/** The row of the error table for a failed storage step (see the module table). */
export function storageFailureKind(err: unknown): ErrorKind {
  // A bounded walk down `cause` (StorageError carries the FsError it wraps).
  let at: unknown = err;
  for (let depth = 0; depth < 4 && typeof at === "object" && at !== null; depth++) {
    if (at instanceof BrokerError) return at.kind;
    // The cold tier's store failing (unreachable, refusing, short answers) can pass.
    if (at instanceof ColdStoreError)
      return at.kind === "invalid" ? Errors.internal : Errors.storageError;
    const code = (at as { code?: unknown }).code;
    if (typeof code === "string" && retriableFsCodes.has(code)) return Errors.storageError;
    at = (at as { cause?: unknown }).cause;
  }
  return Errors.internal;
}

/** The cold tier's store error in `err`'s `cause` chain (a bounded walk), or null. */
export function coldStoreCause(err: unknown): ColdStoreError | null {
  let at: unknown = err;
  for (let depth = 0; depth < 4 && typeof at === "object" && at !== null; depth++) {
    if (at instanceof ColdStoreError) return at;
    at = (at as { cause?: unknown }).cause;
  }
  return null;
}

/**
 * The client-visible error for `err`, thrown by the step `action` describes (e.g.
 * `Cannot delete topic "t": moving … failed`): `storage_error` or `internal` by the module table.
 * A BrokerError passes through unchanged.
 */
export function storageFailure(action: string, err: unknown): BrokerError {
  if (err instanceof BrokerError) return err;
  return new BrokerError(storageFailureKind(err), `${action}: ${errorMessage(err)}`);
}

/**
 * A storage layer error as the error table's row: a `StorageError` by its kind (fenced, write
 * failed, out of range, …), an `FsError` outside the append path by {@link storageFailure}.
 * Anything else is returned unchanged.
 */
export function toBrokerError(err: unknown): unknown {
  if (err instanceof FsError) {
    // A disk read or write failed outside the append path's own handling (e.g. a fetch's read):
    // storage_error if retrying can help, else internal (the module table).
    return storageFailure("Cannot complete the request", err);
  }
  // A read of offloaded records: its own code, so the client hears the cold tier is down rather
  // than a disk error (newuser18 F4).
  // A stored object that fails its checks is its own, final, code (attack report s18 #13).
  if (err instanceof ColdStoreError)
    return err.kind === "invalid"
      ? storageFailure("Cannot read the cold tier", err)
      : err.kind === "corrupt"
        ? new BrokerError(Errors.coldDataCorrupt, `Cannot read the cold tier: ${err.message}`)
        : new BrokerError(Errors.coldTierUnavailable, `Cannot read the cold tier: ${err.message}`);
  if (!(err instanceof StorageError)) return err;
  switch (err.kind) {
    case "fenced":
      return new BrokerError(Errors.partitionFenced, err.message);
    case "write_failed":
      return new BrokerError(storageFailureKind(err), err.message);
    case "out_of_range":
      return new BrokerError(Errors.offsetOutOfRange, err.message);
    case "unsupported":
      return new BrokerError(Errors.unsupported, err.message);
    case "closed":
      return new BrokerError(Errors.unavailable, err.message);
    case "invalid":
      return new BrokerError(Errors.invalidRequest, err.message);
  }
}
