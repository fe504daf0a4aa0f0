/**
 * The idempotent-producer journal, `producers.journal` (docs/storage.md "Files on disk"): one entry per
 * idempotent batch, made durable *before* the log write it describes (the broker calls
 * {@link ProducerJournal.append} from the partition's `beforeWrite` hook). Together with the
 * `producers.json` snapshot it rebuilds the producer state at start (`broker/producers/`).
 *
 * File layout (integers big-endian, like the record format):
 *
 * ```
 * header        magic u32 0x4553504a ("ESPJ") | version u16 (1) | reserved u16 (0) |
 *               generation u64                                 16 bytes
 * entry …       repeated to the end of the file:
 *   entry_len      u32    bytes after this field, crc included (≥ 59, ≤ 59 + 2 × 249)
 *   kind           u8     1 = batch
 *   timestamp_ms   i64    broker clock when journaled (producer idle expiry)
 *   epoch          u32
 *   partition      u32
 *   base_sequence  u64    the batch's first sequence number
 *   batch_count    u32    records in the whole batch
 *   first_index    u32    index in the batch of the first record this entry writes (0, or k
 *                         when the missing suffix of a batch cut short by a crash is written)
 *   count          u32    records this entry writes (batch_count − first_index)
 *   base_offset    u64    offset of the first record this entry writes
 *   fingerprint    u32    CRC-32 of that record's key_len | key | value_len | value
 *   producer_id    str16  u16 length | UTF-8
 *   topic          str16
 *   crc32          u32    over kind … topic
 * ```
 *
 * The `generation` ties the journal to the snapshot: the snapshot names the generation of the
 * journal that continues it. Rotation writes a snapshot naming generation g + 1 (atomically),
 * then resets the journal to an empty one of generation g + 1 (truncate and fsync, then write the
 * header and fsync, so old entries can never reappear behind a new header); a crash in between
 * leaves a journal of generation g, which the next start recognises as already folded into the
 * snapshot, or a file without a valid header, which is an empty journal.
 *
 * Durability: {@link ProducerJournal.append} resolves only once an fsync covers the entry. Appends
 * are group-committed: one write and one fsync for everything queued while the previous fsync
 * ran, and only one write is ever unsynced at a time — so after a crash only the last write can
 * be torn, and cutting the file at the first entry that does not decode loses nothing that any
 * log write depended on — provided no entry decodes after it: one that does means the bad bytes
 * are damage, not a torn write, and the file is left alone ({@link scanJournal}). A failed write is cut off (and the cut fsynced) before its appends get
 * the error; if that fails, or an fsync fails, the journal is fenced: every later append rejects
 * until a restart (a failed fsync is never retried, docs/decisions.md §7).
 */
import { assert } from "../lib/assert.ts";
import { crc32 } from "../lib/crc32.ts";
import { readI64, readU64, viewOf, writeI64, writeU64 } from "../lib/bytes.ts";
import type { Logger } from "../lib/logger.ts";
import { producerJournalBytesMax } from "../lib/limits.ts";
import { dirname, readPrefix, type FileHandle, type FileSystem } from "../fs/types.ts";
import { StorageError } from "./errors.ts";
import { errorMessage } from "../lib/errors.ts";

/** `ESPJ`: the first four bytes of a producer journal. */
export const journalMagic = 0x4553504a;
/** Format version written in the header. */
export const journalVersion = 1;
/** Bytes of the header. */
export const journalHeaderBytes = 16;
/** Bytes of an entry with empty producer id and topic, after `entry_len`. */
export const journalEntryFixedBytes = 1 + 8 + 4 + 4 + 8 + 4 + 4 + 4 + 8 + 4 + 2 + 2 + 4;
/** Longest producer id or topic in an entry, in UTF-8 bytes. */
export const journalNameBytesMax = 249;
const entryLenMax = journalEntryFixedBytes + 2 * journalNameBytesMax;
const kindBatch = 1;

/** One journal entry: records of an idempotent batch about to be written at `baseOffset`. */
export interface ProducerJournalEntry {
  /** Broker clock when journaled, ms since the epoch. */
  timestampMs: number;
  producerId: string;
  epoch: number;
  topic: string;
  partition: number;
  /** The batch's first sequence number. */
  baseSequence: number;
  /** Records in the whole batch. */
  batchCount: number;
  /** Index in the batch of the first record this entry writes (0 unless completing a cut batch). */
  firstIndex: number;
  /** Records this entry writes: `batchCount − firstIndex`. */
  count: number;
  /** Offset of the first record this entry writes. */
  baseOffset: number;
  /** CRC-32 of that first record's key_len | key | value_len | value (see `recordFingerprint`). */
  fingerprint: number;
}

/**
 * Damage in the middle of a journal: a bad entry (or header) with a decodable entry after it. Only
 * the last write can be torn, so this is never a torn tail (docs/decisions.md §1).
 */
export interface JournalCorruption {
  /** Byte position of the first bad entry (0 for a bad header). */
  position: number;
  /** Byte position of the first entry after it that decodes. */
  nextEntryPosition: number;
  /** Entries that decode after `position` (the scan resumes at each one and after each gap). */
  entriesAfter: number;
  /** What is wrong, for logs and `es-broker check`. */
  reason: string;
}

/** What {@link scanJournal} found in a journal's bytes. */
export interface JournalScan {
  /** The header's generation, or null when the file has no valid header. */
  generation: number | null;
  /** Whole entries before the first bad one, in file order. */
  entries: ProducerJournalEntry[];
  /** Where the entries end: the file size, or the first bad entry. */
  endPosition: number;
  /** Null when everything from `endPosition` on is a torn tail (or nothing). */
  corruption: JournalCorruption | null;
}

/** What {@link ProducerJournal.open} found. */
export interface JournalOpenResult {
  /** Null when the file is corrupt (`corruption` says why): it is then left untouched and closed. */
  journal: ProducerJournal | null;
  /** The file's generation (0 for a new or headerless file). */
  generation: number;
  /** Whole entries, in file order (before the damage, when corrupt). */
  entries: ProducerJournalEntry[];
  /** Bytes cut off the end (a torn tail), 0 if none. */
  cutBytes: number;
  /** Damage that is not a torn tail, or null. */
  corruption: JournalCorruption | null;
}

const encoder = new TextEncoder();
const strictUtf8 = new TextDecoder("utf-8", { fatal: true });

/**
 * Encodes one entry (with its `entry_len` prefix).
 * @throws AssertionError if a field is out of range (the broker validates requests first).
 */
export function encodeJournalEntry(entry: ProducerJournalEntry): Uint8Array {
  const id = encoder.encode(entry.producerId);
  const topic = encoder.encode(entry.topic);
  assert(id.length >= 1 && id.length <= journalNameBytesMax, "producer id fits an entry");
  assert(topic.length >= 1 && topic.length <= journalNameBytesMax, "topic fits an entry");
  assert(
    entry.firstIndex + entry.count === entry.batchCount && entry.count >= 1,
    "an entry writes the rest of its batch",
  );
  const len = journalEntryFixedBytes + id.length + topic.length;
  const out = new Uint8Array(4 + len);
  const v = viewOf(out);
  v.setUint32(0, len);
  let p = 4;
  v.setUint8(p, kindBatch);
  writeI64(v, p + 1, entry.timestampMs);
  v.setUint32(p + 9, entry.epoch);
  v.setUint32(p + 13, entry.partition);
  writeU64(v, p + 17, entry.baseSequence);
  v.setUint32(p + 25, entry.batchCount);
  v.setUint32(p + 29, entry.firstIndex);
  v.setUint32(p + 33, entry.count);
  writeU64(v, p + 37, entry.baseOffset);
  v.setUint32(p + 45, entry.fingerprint);
  p += 49;
  v.setUint16(p, id.length);
  out.set(id, p + 2);
  p += 2 + id.length;
  v.setUint16(p, topic.length);
  out.set(topic, p + 2);
  p += 2 + topic.length;
  v.setUint32(p, crc32(out, 4, p));
  assert(p + 4 === out.length, "entry encoded to its length");
  return out;
}

/**
 * Decodes the entry at `pos`. Returns null if it is not a whole, valid entry (short, implausible
 * length, bad CRC, unknown kind, bad UTF-8, inconsistent counts) — checked before anything is
 * allocated for it.
 */
export function decodeJournalEntry(
  bytes: Uint8Array,
  pos: number,
): { entry: ProducerJournalEntry; sizeBytes: number } | null {
  if (bytes.length - pos < 4) return null;
  const v = viewOf(bytes);
  const len = v.getUint32(pos);
  if (len < journalEntryFixedBytes || len > entryLenMax || bytes.length - pos - 4 < len)
    return null;
  const body = pos + 4;
  const crcPos = body + len - 4;
  if (v.getUint32(crcPos) !== crc32(bytes, body, crcPos)) return null;
  if (v.getUint8(body) !== kindBatch) return null;
  const timestampMs = readI64(v, body + 1);
  const epoch = v.getUint32(body + 9);
  const partition = v.getUint32(body + 13);
  const baseSequence = readU64(v, body + 17);
  const batchCount = v.getUint32(body + 25);
  const firstIndex = v.getUint32(body + 29);
  const count = v.getUint32(body + 33);
  const baseOffset = readU64(v, body + 37);
  const fingerprint = v.getUint32(body + 45);
  let p = body + 49;
  const idLen = v.getUint16(p);
  if (p + 2 + idLen + 2 > crcPos) return null;
  let producerId: string;
  let topic: string;
  try {
    producerId = strictUtf8.decode(bytes.subarray(p + 2, p + 2 + idLen));
    p += 2 + idLen;
    const topicLen = v.getUint16(p);
    if (p + 2 + topicLen !== crcPos) return null;
    topic = strictUtf8.decode(bytes.subarray(p + 2, p + 2 + topicLen));
  } catch {
    return null;
  }
  if (
    !Number.isSafeInteger(baseSequence) ||
    !Number.isSafeInteger(baseOffset) ||
    !Number.isSafeInteger(timestampMs)
  )
    return null;
  if (
    count < 1 ||
    firstIndex + count !== batchCount ||
    producerId.length === 0 ||
    topic.length === 0
  )
    return null;
  return {
    entry: {
      timestampMs,
      producerId,
      epoch,
      topic,
      partition,
      baseSequence,
      batchCount,
      firstIndex,
      count,
      baseOffset,
      fingerprint,
    },
    sizeBytes: 4 + len,
  };
}

/**
 * Counts the entries that decode in `bytes` from `from` on, resynchronising byte by byte after
 * anything that does not decode. Returns the first one's position (null if none) and the count.
 * A random position passes the length check with odds of about 1 in 10^7 and the CRC after that,
 * so the cost is one read per byte of damage.
 */
function decodableAfter(bytes: Uint8Array, from: number): { first: number | null; count: number } {
  let first: number | null = null;
  let count = 0;
  let pos = from;
  while (pos < bytes.length) {
    const decoded = decodeJournalEntry(bytes, pos);
    if (decoded === null) {
      pos++;
      continue;
    }
    if (first === null) first = pos;
    count++;
    pos += decoded.sizeBytes;
  }
  return { first, count };
}

/**
 * Reads a journal's bytes without changing anything (start-up and `es-broker check` judge a file
 * alike): the header, the whole entries, and what follows the last one. Bytes after the last whole
 * entry are a torn tail only if no entry decodes anywhere in them: the journal has one unsynced
 * write at a time, and a reset empties the file before it writes the header, so a bad entry or
 * header followed by a valid entry is damage, not a crash (docs/decisions.md §1).
 */
export function scanJournal(bytes: Uint8Array): JournalScan {
  const v = viewOf(bytes);
  const headerOk =
    bytes.length >= journalHeaderBytes &&
    v.getUint32(0) === journalMagic &&
    v.getUint16(4) === journalVersion;
  if (!headerOk) {
    const after = decodableAfter(bytes, Math.min(journalHeaderBytes, bytes.length));
    return {
      generation: null,
      entries: [],
      endPosition: 0,
      corruption:
        after.first === null
          ? null
          : {
              position: 0,
              nextEntryPosition: after.first,
              entriesAfter: after.count,
              reason: `the header is not a journal header, but ${after.count} entries after it decode`,
            },
    };
  }
  const generation = readU64(v, 8);
  const entries: ProducerJournalEntry[] = [];
  let pos = journalHeaderBytes;
  while (pos < bytes.length) {
    const decoded = decodeJournalEntry(bytes, pos);
    if (decoded === null) break;
    entries.push(decoded.entry);
    pos += decoded.sizeBytes;
  }
  let corruption: JournalCorruption | null = null;
  if (pos < bytes.length) {
    const after = decodableAfter(bytes, pos + 1);
    if (after.first !== null)
      corruption = {
        position: pos,
        nextEntryPosition: after.first,
        entriesAfter: after.count,
        reason: `the entry at byte ${pos} does not decode (length or CRC), but ${after.count} entries after it do, from byte ${after.first}`,
      };
  }
  return { generation, entries, endPosition: pos, corruption };
}

function encodeHeader(generation: number): Uint8Array {
  const out = new Uint8Array(journalHeaderBytes);
  const v = viewOf(out);
  v.setUint32(0, journalMagic);
  v.setUint16(4, journalVersion);
  writeU64(v, 8, generation);
  return out;
}

/**
 * Thrown by a rotation's `writeSnapshot` when the snapshot write failed after its rename, so the
 * new snapshot may or may not be what a restart finds: the journal can then be continued in
 * neither generation safely, and {@link ProducerJournal.rotate} fences it.
 */
export class SnapshotOutcomeUnknown extends Error {
  override name = "SnapshotOutcomeUnknown";
}

interface PendingWrite {
  bytes: Uint8Array;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * The open journal. Appends are group-committed (module comment); {@link rotate} swaps in a new
 * generation after a snapshot. One instance per data directory; not safe to open twice.
 */
export class ProducerJournal {
  readonly path: string;
  #file: FileHandle;
  #logger: Logger;
  #sizeBytes: number;
  #generation: number;
  #entries: number;
  #queue: PendingWrite[] = [];
  #running: Promise<void> | null = null;
  /** While set, the write loop does not start (a rotation is in progress). */
  #paused: Promise<void> | null = null;
  #fenced: string | null = null;
  #closed = false;

  private constructor(
    path: string,
    file: FileHandle,
    logger: Logger,
    sizeBytes: number,
    generation: number,
    entries: number,
  ) {
    this.path = path;
    this.#file = file;
    this.#logger = logger;
    this.#sizeBytes = sizeBytes;
    this.#generation = generation;
    this.#entries = entries;
  }

  /**
   * Opens (creating if missing) the journal at `path`, reads every whole entry, and cuts a torn
   * tail (reported as `producers.journal_torn_tail`, the cut fsynced). A file without a valid
   * header (new, empty, or torn while being reset) is rewritten as an empty journal of generation
   * `generationIfNew`. A corrupt file ({@link scanJournal}: a bad entry or header with a valid
   * entry after it) is reported (`producers.journal_corrupt`), left untouched and closed: the
   * result then has `journal` null and `corruption` set.
   * @throws FsError if the file cannot be opened, read, cut or written; StorageError "invalid" if
   *   it is over {@link producerJournalBytesMax}.
   */
  static async open(
    fs: FileSystem,
    options: { path: string; logger: Logger; generationIfNew: number },
  ): Promise<JournalOpenResult> {
    const { path, logger } = options;
    const file = await fs.open(path, { create: true });
    try {
      const size = await file.size();
      if (size > producerJournalBytesMax) {
        throw new StorageError(
          "invalid",
          `Cannot read ${path}: it is ${size} bytes, over the limit of ${producerJournalBytesMax}`,
        );
      }
      const bytes = await readPrefix(file, size);
      const got = bytes.length;
      const scan = scanJournal(bytes);
      if (scan.corruption !== null) {
        // Left as it is for whoever repairs it; the caller makes idempotent produce unavailable.
        logger.log("error", "producers.journal_corrupt", {
          file: path,
          position: scan.corruption.position,
          next_entry_position: scan.corruption.nextEntryPosition,
          entries_before: scan.entries.length,
          entries_after: scan.corruption.entriesAfter,
          reason: scan.corruption.reason,
        });
        await file.close();
        return {
          journal: null,
          generation: scan.generation ?? 0,
          entries: scan.entries,
          cutBytes: 0,
          corruption: scan.corruption,
        };
      }
      if (scan.generation === null) {
        if (got > 0)
          logger.log("warn", "producers.journal_header_invalid", {
            file: path,
            size_bytes: got,
            reason:
              "no valid header (torn while being reset, or not a journal): starting an empty one",
          });
        const generation = options.generationIfNew;
        await file.truncate(0);
        await file.sync();
        await file.write(encodeHeader(generation), 0);
        await file.sync();
        // A file this open created has a name only a directory fsync makes durable.
        await fs.syncDir(dirname(path));
        return {
          journal: new ProducerJournal(path, file, logger, journalHeaderBytes, generation, 0),
          generation,
          entries: [],
          cutBytes: got,
          corruption: null,
        };
      }
      const generation = scan.generation;
      const entries = scan.entries;
      const pos = scan.endPosition;
      const cutBytes = got - pos;
      if (cutBytes > 0) {
        await file.truncate(pos);
        await file.sync();
        logger.log("warn", "producers.journal_torn_tail", {
          file: path,
          position: pos,
          cut_bytes: cutBytes,
          entries_kept: entries.length,
        });
      }
      return {
        journal: new ProducerJournal(path, file, logger, pos, generation, entries.length),
        generation,
        entries,
        cutBytes,
        corruption: null,
      };
    } catch (err) {
      await file.close().catch(() => {});
      throw err;
    }
  }

  /** The generation of the current file. */
  get generation(): number {
    return this.#generation;
  }

  /** Entries appended to the current generation (including those read at open). */
  get entryCount(): number {
    return this.#entries;
  }

  /** Bytes of the current file. */
  get sizeBytes(): number {
    return this.#sizeBytes;
  }

  /** True once a failed fsync or an uncleanable failed write has fenced the journal. */
  get fenced(): boolean {
    return this.#fenced !== null;
  }

  /**
   * Appends one entry; resolves once an fsync covers it.
   * @throws StorageError "fenced" (restart required), "write_failed" (nothing of it is in the
   *   file), "closed".
   */
  append(entry: ProducerJournalEntry): Promise<void> {
    if (this.#closed)
      return Promise.reject(
        new StorageError("closed", `Cannot append to ${this.path}: it is closed`),
      );
    if (this.#fenced !== null) return Promise.reject(this.#fencedError());
    const bytes = encodeJournalEntry(entry);
    return new Promise((resolve, reject) => {
      this.#queue.push({ bytes, resolve, reject });
      this.#kick();
    });
  }

  #fencedError(): StorageError {
    return new StorageError(
      "fenced",
      `Cannot append to ${this.path}: the producer journal is fenced after ${this.#fenced}, restart required`,
    );
  }

  #kick(): void {
    if (this.#running !== null || this.#paused !== null || this.#queue.length === 0) return;
    this.#running = this.#drain().finally(() => {
      this.#running = null;
      this.#kick();
    });
  }

  async #drain(): Promise<void> {
    while (this.#queue.length > 0 && this.#paused === null) {
      const group = this.#queue.splice(0);
      if (this.#fenced !== null || this.#closed) {
        const err =
          this.#fenced !== null
            ? this.#fencedError()
            : new StorageError("closed", `Cannot append to ${this.path}: it is closed`);
        for (const w of group) w.reject(err);
        continue;
      }
      let total = 0;
      for (const w of group) total += w.bytes.length;
      const buf = new Uint8Array(total);
      let p = 0;
      for (const w of group) {
        buf.set(w.bytes, p);
        p += w.bytes.length;
      }
      const before = this.#sizeBytes;
      try {
        await this.#file.write(buf, before);
      } catch (err) {
        try {
          await this.#file.truncate(before);
          await this.#file.sync();
        } catch (cutErr) {
          this.#fence(
            `a failed write (${errorMessage(err)}) whose partial bytes could not be cut off (${errorMessage(cutErr)})`,
          );
          for (const w of group) w.reject(this.#fencedError());
          continue;
        }
        const failed = new StorageError(
          "write_failed",
          `Cannot append to ${this.path}: write failed: ${errorMessage(err)}`,
          { cause: err },
        );
        for (const w of group) w.reject(failed);
        continue;
      }
      this.#sizeBytes = before + total;
      try {
        await this.#file.sync();
      } catch (err) {
        this.#fence(`a failed fsync (${errorMessage(err)})`);
        for (const w of group) w.reject(this.#fencedError());
        continue;
      }
      this.#entries += group.length;
      for (const w of group) w.resolve();
    }
  }

  #fence(reason: string): void {
    if (this.#fenced !== null) return;
    this.#fenced = reason;
    this.#logger.log("error", "producers.journal_fenced", { file: this.path, reason });
    const err = this.#fencedError();
    for (const w of this.#queue.splice(0)) w.reject(err);
  }

  /**
   * Starts a new generation: waits for the write in progress, holds new appends back, runs
   * `writeSnapshot(nextGeneration)` (which must durably record everything the journal holds,
   * naming `nextGeneration`), then resets the file to an empty journal of that generation and
   * lets appends continue into it. If `writeSnapshot` rejects, nothing changes (the rejection is
   * passed on) — unless it rejects with {@link SnapshotOutcomeUnknown}, or the reset fails: then
   * the journal is fenced (a restart sorts out which snapshot holds).
   * @throws whatever `writeSnapshot` throws; StorageError "fenced" if the reset failed.
   */
  async rotate(writeSnapshot: (nextGeneration: number) => Promise<void>): Promise<void> {
    if (this.#fenced !== null) throw this.#fencedError();
    while (this.#paused !== null) await this.#paused;
    let resume!: () => void;
    this.#paused = new Promise<void>((r) => (resume = r));
    try {
      if (this.#running !== null) await this.#running;
      if (this.#fenced !== null) throw this.#fencedError();
      const next = this.#generation + 1;
      try {
        await writeSnapshot(next);
      } catch (err) {
        if (err instanceof SnapshotOutcomeUnknown)
          this.#fence(
            `a snapshot write of generation ${next} whose outcome is unknown (${err.message})`,
          );
        throw err;
      }
      try {
        await this.#file.truncate(0);
        await this.#file.sync();
        await this.#file.write(encodeHeader(next), 0);
        await this.#file.sync();
      } catch (err) {
        this.#fence(`a failed reset to generation ${next} (${errorMessage(err)})`);
        throw this.#fencedError();
      }
      this.#generation = next;
      this.#sizeBytes = journalHeaderBytes;
      this.#entries = 0;
    } finally {
      this.#paused = null;
      resume();
      this.#kick();
    }
  }

  /** Waits for queued appends, then closes the file. Later appends reject with "closed". */
  async close(): Promise<void> {
    if (this.#closed) return;
    while (this.#paused !== null) await this.#paused;
    if (this.#running !== null) await this.#running;
    this.#closed = true;
    for (const w of this.#queue.splice(0))
      w.reject(new StorageError("closed", `Cannot append to ${this.path}: it is closed`));
    await this.#file.close();
  }
}
