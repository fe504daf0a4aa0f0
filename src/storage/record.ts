/**
 * Record codec (docs/storage.md "Records").
 *
 * A stored record, all integers big-endian:
 *
 * ```
 * record_len     u32      bytes that follow (28 + key bytes + value bytes)
 * offset         u64
 * timestamp_ms   i64
 * key_len        i32      -1 = no key; 0 = the empty key (a real key, docs/decisions.md §12)
 * key            [u8]
 * value_len      u32
 * value          [u8]      empty = tombstone
 * crc32          u32      CRC-32 (IEEE) over offset … value
 * ```
 *
 * A producer sends records as an *entry batch*: the same layout from `timestamp_ms` to `value`,
 * repeated, with no length, offset or CRC (`timestamp_ms` −1 asks the broker to stamp it). Because
 * an entry is exactly the middle of a stored record, encoding a batch for the log is one copy per
 * record plus a CRC, with no per-record objects. The TCP produce body carries this format verbatim.
 *
 * Every decoder checks `record_len` against [{@link recordLenMin}, {@link recordLenMax}] before
 * it reads further, and never allocates a length a file or a client claims.
 */
import { crc32, crc32Combine, crc32ContinueRange, crc32IsNative } from "../lib/crc32.ts";
import {
  i32At,
  i64At,
  readI64,
  readU64,
  setI64At,
  setU32At,
  setU64At,
  u32At,
  viewOf,
  writeI64,
} from "../lib/bytes.ts";
import {
  offsetMax,
  recordLenMax,
  recordLenMin,
  recordLengthPrefixBytes,
  recordOverheadBytes,
  recordOverEntryBytes,
  recordPayloadBytesMax,
} from "../lib/limits.ts";

/** Bytes of an entry excluding key and value: timestamp 8 + key_len 4 + value_len 4. */
export const entryOverheadBytes = 16;

/** Thrown when a producer's entry batch is malformed. `index` is the 0-based record it concerns. */
export class RecordFormatError extends Error {
  override name = "RecordFormatError";
  constructor(
    message: string,
    readonly index: number,
    /** The field is a valid i64 above 2^53 - 1, which the broker does not support (not malformed). */
    readonly aboveSafeInteger = false,
  ) {
    super(message);
  }
}

/** A validated entry batch: `bytes` holds `count` entries back to back. */
export interface EntryBatch {
  readonly bytes: Uint8Array;
  readonly count: number;
}

/**
 * Stored records to append verbatim (a follower's copy of its leader's records; docs/cluster.md
 * "Followers"): `bytes` holds `count` stored records (docs/storage.md "Records") at the consecutive
 * offsets from `baseOffset`, every one already checked end to end ({@link checkStoredRuns}), with
 * their timestamps set. The log writes them as they are, only at those very offsets.
 */
export interface StoredRecords {
  readonly stored: true;
  readonly bytes: Uint8Array;
  readonly count: number;
  readonly baseOffset: number;
}

/** What `PartitionLog` appends: an entry batch (offsets assigned, CRCs computed) or stored records. */
export type AppendRecords = EntryBatch | StoredRecords;

/** Whether `records` are stored records ({@link StoredRecords}), not entries. */
export function isStored(records: AppendRecords): records is StoredRecords {
  return (records as StoredRecords).stored === true;
}

/** Bytes `records` take in the log: stored records as they are, entries once encoded. */
export function logBytesOf(records: AppendRecords): number {
  return isStored(records)
    ? records.bytes.length
    : records.bytes.length + records.count * recordOverEntryBytes;
}

/**
 * Checks the structure of an entry batch without allocating: every length in bounds, every key
 * and value within `bytes`, nothing left over, `timestamp_ms` ≥ 0 or exactly -1.
 * @returns the number of entries.
 * @throws RecordFormatError naming the record index and the field.
 */
export function scanEntries(bytes: Uint8Array, options: { maxCount?: number } = {}): number {
  const maxCount = options.maxCount ?? Number.MAX_SAFE_INTEGER;
  let pos = 0;
  let count = 0;
  while (pos < bytes.length) {
    if (count >= maxCount)
      throw new RecordFormatError(`batch holds more than ${maxCount} records`, count);
    if (bytes.length - pos < entryOverheadBytes) {
      throw new RecordFormatError(
        `record ${count} is truncated: ${bytes.length - pos} bytes left, header needs ${entryOverheadBytes}`,
        count,
      );
    }
    const ts = i64At(bytes, pos);
    if (ts > Number.MAX_SAFE_INTEGER) {
      // The exact value sent: `ts` is rounded to a double.
      const sent = (BigInt(i32At(bytes, pos)) << 32n) | BigInt(u32At(bytes, pos + 4));
      throw new RecordFormatError(
        `record ${count} has timestamp_ms ${sent}: above 2^53 - 1`,
        count,
        true,
      );
    }
    if (ts < -1)
      throw new RecordFormatError(
        `record ${count} has timestamp_ms ${ts}: must be >= 0, or -1 for the broker's clock`,
        count,
      );
    const keyLen = i32At(bytes, pos + 8);
    if (keyLen < -1)
      throw new RecordFormatError(`record ${count} has key_len ${keyLen}: must be ≥ -1`, count);
    const keyBytes = Math.max(keyLen, 0);
    if (keyBytes > recordPayloadBytesMax || pos + 12 + keyBytes + 4 > bytes.length) {
      throw new RecordFormatError(
        `record ${count} has key_len ${keyLen}, past the end of the batch`,
        count,
      );
    }
    const valueLen = u32At(bytes, pos + 12 + keyBytes);
    if (keyBytes + valueLen > recordPayloadBytesMax) {
      throw new RecordFormatError(
        `record ${count} is ${keyBytes + valueLen} bytes of key and value, over the limit of ${recordPayloadBytesMax}`,
        count,
      );
    }
    const end = pos + entryOverheadBytes + keyBytes + valueLen;
    if (end > bytes.length)
      throw new RecordFormatError(
        `record ${count} has value_len ${valueLen}, past the end of the batch`,
        count,
      );
    pos = end;
    count++;
  }
  return count;
}

/**
 * Builds an entry batch from keys and values. Grows one buffer; `add` copies key and value once.
 */
export class EntryBatchBuilder {
  #buf: Uint8Array;
  #view: DataView;
  #pos = 0;
  #count = 0;

  /**
   * @param capacityBytes initial buffer size in bytes (it grows as needed).
   * @param buffer where to build instead of a new buffer of `capacityBytes` (a slab's free
   *   part, say); the built batch is a view of it unless it had to grow.
   */
  constructor(capacityBytes = 4096, buffer?: Uint8Array) {
    this.#buf = buffer ?? new Uint8Array(Math.max(64, capacityBytes));
    this.#view = viewOf(this.#buf);
  }

  /** Number of entries added so far. */
  get count(): number {
    return this.#count;
  }

  /** Bytes used so far. */
  get sizeBytes(): number {
    return this.#pos;
  }

  /**
   * Appends one entry. `key` null means no key; `timestampMs` −1 (the default) lets the broker stamp it.
   * @throws RecordFormatError if key + value exceed {@link recordPayloadBytesMax} or the timestamp is invalid.
   */
  add(key: Uint8Array | null, value: Uint8Array, timestampMs = -1): this {
    const keyBytes = key === null ? 0 : key.length;
    if (keyBytes + value.length > recordPayloadBytesMax) {
      throw new RecordFormatError(
        `record ${this.#count} is ${keyBytes + value.length} bytes of key and value, over the limit of ${recordPayloadBytesMax}`,
        this.#count,
      );
    }
    if (!Number.isSafeInteger(timestampMs) || timestampMs < -1) {
      throw new RecordFormatError(
        `record ${this.#count} has timestamp ${timestampMs}: must be an integer ≥ 0, or -1`,
        this.#count,
      );
    }
    const need = entryOverheadBytes + keyBytes + value.length;
    this.#reserve(need);
    const v = this.#view;
    let p = this.#pos;
    writeI64(v, p, timestampMs);
    v.setInt32(p + 8, key === null ? -1 : key.length);
    p += 12;
    if (key !== null) {
      this.#buf.set(key, p);
      p += key.length;
    }
    v.setUint32(p, value.length);
    p += 4;
    this.#buf.set(value, p);
    this.#pos = p + value.length;
    this.#count++;
    return this;
  }

  #reserve(need: number): void {
    if (this.#pos + need <= this.#buf.length) return;
    let cap = Math.max(64, this.#buf.length * 2);
    while (cap < this.#pos + need) cap *= 2;
    const next = new Uint8Array(cap);
    next.set(this.#buf.subarray(0, this.#pos));
    this.#buf = next;
    this.#view = viewOf(next);
  }

  /** The batch built so far (a view of the internal buffer; do not add after using it). */
  build(): EntryBatch {
    return { bytes: this.#buf.subarray(0, this.#pos), count: this.#count };
  }
}

/**
 * Outcome of decoding one stored record at a position:
 * - `Ok`: a whole valid record; the cursor's fields describe it.
 * - `Incomplete`: fewer bytes remain than the header or `record_len` needs (a torn tail, or the read window ended).
 * - `Invalid`: the bytes cannot be a valid record (implausible length, bad key_len/value_len, CRC mismatch, offset above 2^53 − 1).
 */
export const DecodeStatus = { Ok: 0, Incomplete: 1, Invalid: 2 } as const;
/** One of the {@link DecodeStatus} values. */
export type DecodeStatus = (typeof DecodeStatus)[keyof typeof DecodeStatus];

/**
 * Whether every record in `bytes[start, end)` — whole stored records back to back — carries the
 * CRC of its bytes, checked with one CRC-32 over the whole range (the runtime's native one where
 * installed: one call instead of one per record) against the stored CRCs combined with the bytes
 * between them ({@link crc32Combine}: a few table lookups per record). Each `record_len` must be
 * plausible and inside the range; nothing is allocated. false for any mismatch or implausible
 * length: the caller then decodes record by record ({@link RecordCursor}), which finds the bad
 * one. A single damaged record always fails the check (its CRC residue is non-zero and
 * multiplying by a power of x keeps it so); damage in several records cancelling out is as
 * likely as a random CRC match, 2^−32 (docs/storage.md "Records").
 */
export function recordCrcsMatch(bytes: Uint8Array, start: number, end: number): boolean {
  if (end <= start) return true;
  const v = viewOf(bytes);
  let combined = 0;
  let previousCrcPos = -1;
  for (let pos = start; pos < end; ) {
    if (end - pos < recordLengthPrefixBytes) return false;
    const len = v.getUint32(pos);
    if (len < recordLenMin || len > recordLenMax || end - pos - recordLengthPrefixBytes < len)
      return false;
    const body = pos + recordLengthPrefixBytes;
    const crcPos = body + len - 4;
    const stored = v.getUint32(crcPos);
    if (previousCrcPos < 0) combined = stored;
    else
      combined = crc32Combine(
        // The previous record's CRC and this one's record_len lie between the two bodies.
        crc32ContinueRange(combined, bytes, previousCrcPos, body),
        stored,
        len - 4,
      );
    previousCrcPos = crcPos;
    pos = crcPos + 4;
  }
  return crc32(bytes, start + recordLengthPrefixBytes, previousCrcPos) === combined;
}

/**
 * The fields of one stored record that already passed its length and CRC checks (a chunk of
 * `scanSegment`, a checked fetch answer), read without checking again: call
 * {@link RecordHeader.parse} per record. For unchecked bytes use {@link RecordCursor}.
 */
export class RecordHeader {
  /** Absolute offset of the record. */
  offset = 0;
  /** Producer or broker time stamp, ms since the epoch. */
  timestampMs = 0;
  /** −1 for no key (docs/decisions.md §12: 0 is the empty key, a real key). */
  keyLen = -1;
  /** Position of the key within the bytes viewed. */
  keyStart = 0;
  /** 0 = a tombstone when the record has a key. */
  valueLen = 0;
  /** Position of the value within the bytes viewed. */
  valueStart = 0;
  /** Bytes of the whole record, `record_len` and CRC included. */
  sizeBytes = 0;

  /** Reads the record whose `record_len` is at `pos` of `view` (`viewOf(bytes)`). */
  parse(view: DataView, pos: number): void {
    const len = view.getUint32(pos);
    const body = pos + recordLengthPrefixBytes;
    this.offset = readU64(view, body);
    this.timestampMs = readI64(view, body + 8);
    this.keyLen = view.getInt32(body + 16);
    this.keyStart = body + 20;
    const valueLenAt = this.keyStart + Math.max(this.keyLen, 0);
    this.valueLen = view.getUint32(valueLenAt);
    this.valueStart = valueLenAt + 4;
    this.sizeBytes = recordLengthPrefixBytes + len;
  }
}

/**
 * Decodes stored records from a byte window without allocating per record: after
 * {@link RecordCursor.decode} returns Ok, the fields (those of {@link RecordHeader}) describe the
 * record at that position, with positions within the window.
 */
export class RecordCursor extends RecordHeader {
  /** Why the last decode was Invalid or Incomplete, for reports. */
  reason = "";
  /**
   * false: {@link decode} skips the CRC (every other check stays) — only for records whose CRCs
   * are checked together afterwards ({@link recordCrcsMatch}) or were checked before.
   */
  checkCrc = true;

  #bytes: Uint8Array = new Uint8Array(0);
  #view: DataView = new DataView(new ArrayBuffer(0));

  /** Points the cursor at a new window of bytes. */
  reset(bytes: Uint8Array): this {
    this.#bytes = bytes;
    this.#view = viewOf(bytes);
    return this;
  }

  /** The window the cursor reads. */
  get bytes(): Uint8Array {
    return this.#bytes;
  }

  /**
   * Decodes the record starting at `pos` within the window (up to `end`, default the window's end).
   * Order of checks: `record_len` plausible, whole record present, `key_len` ≥ −1 and inside,
   * `value_len` consistent, offset within the safe range, CRC. Nothing is allocated.
   */
  decode(pos: number, end = this.#bytes.length): DecodeStatus {
    const v = this.#view;
    if (end - pos < recordLengthPrefixBytes)
      return this.#fail(DecodeStatus.Incomplete, "fewer than 4 bytes left for record_len");
    const len = v.getUint32(pos);
    if (len < recordLenMin || len > recordLenMax)
      return this.#fail(
        DecodeStatus.Invalid,
        `record_len ${len} is outside [${recordLenMin}, ${recordLenMax}]`,
      );
    if (end - pos - recordLengthPrefixBytes < len)
      return this.#fail(DecodeStatus.Incomplete, `record_len ${len} runs past the end of the data`);
    const body = pos + recordLengthPrefixBytes;
    const keyLen = v.getInt32(body + 16);
    if (keyLen < -1) return this.#fail(DecodeStatus.Invalid, `key_len ${keyLen} is below -1`);
    const keyBytes = Math.max(keyLen, 0);
    if (keyBytes > len - recordOverheadBytes)
      return this.#fail(DecodeStatus.Invalid, `key_len ${keyLen} does not fit record_len ${len}`);
    const valueLenPos = body + 20 + keyBytes;
    const valueLen = v.getUint32(valueLenPos);
    if (valueLen !== len - recordOverheadBytes - keyBytes)
      return this.#fail(
        DecodeStatus.Invalid,
        `value_len ${valueLen} does not match record_len ${len}`,
      );
    if (this.checkCrc) {
      const crcPos = body + len - 4;
      const expected = v.getUint32(crcPos);
      const actual = crc32(this.#bytes, body, crcPos);
      if (expected !== actual)
        return this.#fail(
          DecodeStatus.Invalid,
          `crc mismatch: stored ${expected.toString(16)}, computed ${actual.toString(16)}`,
        );
    }
    const offset = readU64(v, body);
    if (offset > offsetMax)
      return this.#fail(DecodeStatus.Invalid, `offset ${offset} is above 2^53 - 1`);
    this.parse(v, pos);
    this.reason = "";
    return DecodeStatus.Ok;
  }

  /** The key of the last decoded record (a view), or null for no key. */
  key(): Uint8Array | null {
    return this.keyLen < 0
      ? null
      : this.#bytes.subarray(this.keyStart, this.keyStart + this.keyLen);
  }

  /** The value of the last decoded record (a view). */
  value(): Uint8Array {
    return this.#bytes.subarray(this.valueStart, this.valueStart + this.valueLen);
  }

  #fail(status: DecodeStatus, reason: string): DecodeStatus {
    this.reason = reason;
    return status;
  }
}

/** Stored size in bytes of a record with this key and value. */
export function storedRecordBytes(keyBytes: number, valueBytes: number): number {
  return recordLengthPrefixBytes + recordOverheadBytes + keyBytes + valueBytes;
}

/**
 * Encodes `batch` as stored records into `out` at `outPos`, assigning offsets from `baseOffset` and
 * stamping entries whose timestamp is −1 with `nowMs`. `out` must have room for
 * `batch.bytes.length + batch.count * recordOverEntryBytes` bytes from `outPos`. The batch must have passed
 * {@link scanEntries}. For each record, calls `onRecord(offset, position)` with its position in
 * `out`, so the caller can add index entries.
 * @returns the largest timestamp in the batch.
 */
export function encodeEntries(
  batch: EntryBatch,
  out: Uint8Array,
  options: {
    outPos: number;
    baseOffset: number;
    nowMs: number;
    onRecord?: (offset: number, position: number) => void;
  },
): number {
  const src = batch.bytes;
  let sp = 0;
  let op = options.outPos;
  let offset = options.baseOffset;
  let maxTs = -1;
  for (let i = 0; i < batch.count; i++) {
    const keyLen = i32At(src, sp + 8);
    const keyBytes = Math.max(keyLen, 0);
    const valueLen = u32At(src, sp + 12 + keyBytes);
    const entryBytes = entryOverheadBytes + keyBytes + valueLen;
    const len = recordOverheadBytes + keyBytes + valueLen;
    options.onRecord?.(offset, op);
    setU32At(out, op, len);
    setU64At(out, op + 4, offset);
    out.set(
      sp === 0 && entryBytes === src.length ? src : src.subarray(sp, sp + entryBytes),
      op + 12,
    );
    let ts = i64At(src, sp);
    if (ts === -1) {
      ts = options.nowMs;
      setI64At(out, op + 12, ts);
    }
    if (ts > maxTs) maxTs = ts;
    const crcPos = op + 4 + len - 4;
    setU32At(out, crcPos, crc32(out, op + 4, crcPos));
    sp += entryBytes;
    op = crcPos + 4;
    offset++;
  }
  return maxTs;
}

/** Encodes one record on its own (tests, tools). */
export function encodeRecord(record: {
  offset: number;
  timestampMs: number;
  key: Uint8Array | null;
  value: Uint8Array;
}): Uint8Array {
  const builder = new EntryBatchBuilder(
    entryOverheadBytes + (record.key?.length ?? 0) + record.value.length,
  );
  builder.add(record.key, record.value, record.timestampMs);
  const batch = builder.build();
  const out = new Uint8Array(batch.bytes.length + 16);
  encodeEntries(batch, out, { outPos: 0, baseOffset: record.offset, nowMs: record.timestampMs });
  return out;
}

/**
 * Walks a validated entry batch without allocating per entry. After `next()` returns true the fields
 * describe the current entry; positions are within the batch's bytes.
 */
export class EntryCursor {
  /** Index of the current entry (0-based). */
  index = -1;
  /** Start of the current entry. */
  start = 0;
  /** One past the end of the current entry. */
  end = 0;
  /** The entry's `timestamp_ms` (−1 = broker clock). */
  timestampMs = -1;
  /** key_len as sent: −1 for no key. */
  keyLen = -1;
  /** Position of the key (valid when keyLen ≥ 0). */
  keyStart = 0;

  constructor(readonly batch: EntryBatch) {}

  /** Moves to the next entry; false at the end. */
  next(): boolean {
    if (this.index + 1 >= this.batch.count) return false;
    const bytes = this.batch.bytes;
    const p = this.end;
    this.index++;
    this.start = p;
    this.timestampMs = i64At(bytes, p);
    this.keyLen = i32At(bytes, p + 8);
    this.keyStart = p + 12;
    const keyBytes = Math.max(this.keyLen, 0);
    const valueLen = u32At(bytes, p + 12 + keyBytes);
    this.end = p + entryOverheadBytes + keyBytes + valueLen;
    return true;
  }

  /** The current entry's key (a view), or null. */
  key(): Uint8Array | null {
    return this.keyLen < 0
      ? null
      : this.batch.bytes.subarray(this.keyStart, this.keyStart + this.keyLen);
  }
}

/**
 * Checks every entry's timestamp against the broker clock (docs/decisions.md §5): −1 or ≥ 0, and at most
 * `maxSkewMs` ahead of the time `nowMs` returns. `nowMs` is called at most once, and only for a
 * batch with a timestamp of its own (a batch of −1 only, the broker's clock, needs no clock read).
 * @throws RecordFormatError naming the first offending record.
 */
export function checkEntryTimestamps(
  batch: EntryBatch,
  nowMs: () => number,
  maxSkewMs: number,
): void {
  const cursor = new EntryCursor(batch);
  let now: number | undefined;
  while (cursor.next()) {
    const ts = cursor.timestampMs;
    if (ts === -1) continue;
    if (ts < -1)
      throw new RecordFormatError(
        `record ${cursor.index} has timestamp ${ts}: must be ≥ 0, or -1 for the broker's clock`,
        cursor.index,
      );
    now ??= nowMs();
    if (ts > now + maxSkewMs) {
      throw new RecordFormatError(
        `record ${cursor.index} has timestamp ${ts}: more than ${maxSkewMs} ms ahead of the broker clock (${now})`,
        cursor.index,
      );
    }
  }
}

/**
 * Sets every entry's timestamp to −1, so that the append stamps the broker clock on each
 * (`timestamp_type: "log_append_time"`, docs/decisions.md §16). Writes into the batch's bytes,
 * which belong to the request being served.
 */
export function stampBrokerTime(batch: EntryBatch): void {
  const cursor = new EntryCursor(batch);
  while (cursor.next()) if (cursor.timestampMs !== -1) setI64At(batch.bytes, cursor.start, -1);
}

/**
 * Checks stored records (a replica fetch's answer, verbatim) end to end, each once: its length,
 * its CRC, and that offsets increase; and splits them into runs of consecutive offsets, each a
 * view of `bytes` to append verbatim at those offsets (`PartitionLog.append`). Nothing is copied
 * or re-encoded: the log stores the very bytes the leader stored. With the runtime's native
 * CRC-32 every record's CRC is checked by one pass over all of them ({@link recordCrcsMatch}), as
 * a segment read checks them; if that fails, record by record, which names the bad one.
 * @throws RecordFormatError naming the record (its index and offset) and what is wrong; nothing
 *   is returned then.
 */
export function checkStoredRuns(bytes: Uint8Array, count: number): StoredRecords[] {
  const cursor = new RecordCursor().reset(bytes);
  cursor.checkCrc = !(crc32IsNative() && recordCrcsMatch(bytes, 0, bytes.length));
  const runs: StoredRecords[] = [];
  let pos = 0;
  let runStart = 0;
  let runCount = 0;
  let runBase = -1;
  let previous = -1;
  let index = 0;
  const close = () => {
    if (runCount > 0)
      runs.push({
        stored: true,
        bytes: bytes.subarray(runStart, pos),
        count: runCount,
        baseOffset: runBase,
      });
  };
  while (pos < bytes.length) {
    const status = cursor.decode(pos);
    if (status !== DecodeStatus.Ok)
      throw new RecordFormatError(
        `stored record ${index} (at byte ${pos}) fails its check: ${cursor.reason}`,
        index,
      );
    if (cursor.offset <= previous)
      throw new RecordFormatError(
        `stored record ${index} has offset ${cursor.offset}, not above the previous ${previous}`,
        index,
      );
    if (cursor.offset !== previous + 1 || runCount === 0) {
      close();
      runStart = pos;
      runCount = 0;
      runBase = cursor.offset;
    }
    if (index >= count)
      throw new RecordFormatError(`more stored records than the ${count} announced`, index);
    runCount++;
    previous = cursor.offset;
    pos += cursor.sizeBytes;
    index++;
  }
  if (index !== count)
    throw new RecordFormatError(`${index} stored records where ${count} were announced`, index);
  close();
  return runs;
}

/** `run` without its first `n` records (already checked: only their lengths are read). */
export function skipStored(run: StoredRecords, n: number): StoredRecords {
  const view = viewOf(run.bytes);
  let pos = 0;
  for (let i = 0; i < n; i++) pos += recordLengthPrefixBytes + view.getUint32(pos);
  return {
    stored: true,
    bytes: run.bytes.subarray(pos),
    count: run.count - n,
    baseOffset: run.baseOffset + n,
  };
}

/**
 * Copies checked stored records ({@link StoredRecords}) into `out` at `outPos`, as they are. For
 * each record, calls `onRecord(offset, position)` with its position in `out`, as
 * {@link encodeEntries} does.
 * @returns the largest timestamp among them.
 */
export function copyStored(
  records: StoredRecords,
  out: Uint8Array,
  options: { outPos: number; onRecord?: (offset: number, position: number) => void },
): number {
  const src = records.bytes;
  out.set(src, options.outPos);
  const view = viewOf(src);
  let maxTs = -1;
  let pos = 0;
  let offset = records.baseOffset;
  for (let i = 0; i < records.count; i++) {
    options.onRecord?.(offset, options.outPos + pos);
    const ts = readI64(view, pos + recordLengthPrefixBytes + 8);
    if (ts > maxTs) maxTs = ts;
    pos += recordLengthPrefixBytes + view.getUint32(pos);
    offset++;
  }
  return maxTs;
}
