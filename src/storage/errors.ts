/**
 * Errors storage reports to the broker. The broker maps each `kind` to a row of its error table;
 * storage itself knows nothing of HTTP or TCP.
 */

/**
 * What went wrong:
 * - `fenced`: the partition refuses writes after a failed fsync or an uncleanable failed write (restart required).
 * - `write_failed`: a write failed (e.g. ENOSPC) and its partial bytes were cut off; nothing was appended.
 * - `out_of_range`: a read offset below the log start offset or above the high watermark.
 * - `unsupported`: an offset beyond 2^53 − 1 would be needed (docs/decisions.md §6).
 * - `closed`: the partition was closed (shutdown or topic deletion).
 * - `invalid`: the caller passed something storage cannot append (e.g. a bad timestamp).
 */
export type StorageErrorKind =
  | "fenced"
  | "write_failed"
  | "out_of_range"
  | "unsupported"
  | "closed"
  | "invalid";

/** An operating error from storage, with a message naming the partition and the action. */
export class StorageError extends Error {
  override name = "StorageError";
  constructor(
    readonly kind: StorageErrorKind,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}
