/**
 * The one windowed record scanner: every loop that walks the stored records of a log file
 * (recovery's scan and its search for valid records after a corrupt one, a fetch's read of a
 * segment, the background tasks' scans of sealed segments, `es-broker check`) reads the file
 * through a {@link RecordScanner} and decodes records in its window.
 *
 * The scanner holds one window of the file, `[windowStart, windowEnd)`, read with one positional
 * read, and never reads past the end of its range. What it settles, once, for every loop:
 * - A record that the window's end cuts short is reported as {@link ScanStatus.Cut}, distinct from
 *   a record that runs past the end of the range or of the file ({@link ScanStatus.Incomplete}).
 * - {@link RecordScanner.readRecordAt} reads again from a cut record's start, in a window large
 *   enough to hold it. Its size comes from its `record_len`, which decoding has already checked
 *   against [`recordLenMin`, `recordLenMax`]: the scanner never allocates a length the file claims
 *   before that check (docs/storage.md "Records").
 * - A read that returns fewer bytes than asked shows where the file ends ({@link dataEnd}); past
 *   it nothing is read again.
 *
 * The window's buffer is reused when the next window fits it: a view from {@link bytes} or the
 * cursor is valid until the next {@link fill} or {@link readRecordAt}.
 */
import { assert } from "../lib/assert.ts";
import { recordLengthPrefixBytes } from "../lib/limits.ts";
import type { FileHandle } from "../fs/types.ts";
import { DecodeStatus, RecordCursor } from "./record.ts";
import type { ReadWindows } from "./read-windows.ts";

/** What {@link RecordScanner.decode} found at a position. */
export const ScanStatus = {
  /** A whole record that passed its checks: the scanner's cursor describes it. */
  Ok: DecodeStatus.Ok,
  /** The record runs past the end of the range or of the file: it is not all there. */
  Incomplete: DecodeStatus.Incomplete,
  /** The bytes there fail a record's checks (length, key or value length, CRC, offset range). */
  Invalid: DecodeStatus.Invalid,
  /**
   * The window's end cuts the record short and more can be read: {@link
   * RecordScanner.readRecordAt}.
   */
  Cut: 3,
} as const;
/** One of the {@link ScanStatus} values. */
export type ScanStatus = (typeof ScanStatus)[keyof typeof ScanStatus];

/** A window over the records of one file, from which records are decoded in place. */
export class RecordScanner {
  /**
   * Describes the record of the last {@link decode} that returned Ok (positions within the window).
   */
  readonly cursor = new RecordCursor();
  #file: FileHandle;
  #end: number;
  #windowBytes: number;
  #buf: Uint8Array = new Uint8Array(0);
  #start = 0;
  #held = 0;
  #dataEnd: number;
  readonly #windows: ReadWindows | null;

  /**
   * @param file the file to read (the caller owns the handle).
   * @param range `end`: the position nothing at or past is read (the readable end of the log);
   *   `windowBytes`: the bytes of one window (a cut record gets a larger one); `windows`: where
   *   window buffers come from and where one outgrown goes back (the caller gives the last one
   *   back, {@link window}, once nothing reads it), instead of a new buffer each.
   */
  constructor(
    file: FileHandle,
    range: { end: number; windowBytes: number; windows?: ReadWindows },
  ) {
    this.#file = file;
    this.#end = range.end;
    this.#windowBytes = range.windowBytes;
    this.#dataEnd = range.end;
    this.#windows = range.windows ?? null;
  }

  /**
   * The buffer the window lives in (views from {@link bytes} and the cursor are views of it), or
   * null before the first read. With `windows`, the caller gives it back once nothing reads it.
   */
  get window(): Uint8Array | null {
    return this.#buf.length === 0 ? null : this.#buf;
  }

  /** File position of the window's first byte. */
  get windowStart(): number {
    return this.#start;
  }

  /** File position one past the window's last byte. */
  get windowEnd(): number {
    return this.#start + this.#held;
  }

  /**
   * Where the readable data ends: the end of the range, or of the file where a read found it
   * shorter.
   */
  get dataEnd(): number {
    return this.#dataEnd;
  }

  /**
   * Reads one window starting at `pos`: `windowBytes` (or `minBytes` if larger), never past the
   * end of the range. A short read marks where the file ends.
   */
  async fill(pos: number, minBytes = 0): Promise<void> {
    const want = Math.max(0, Math.min(Math.max(this.#windowBytes, minBytes), this.#end - pos));
    if (this.#buf.length < want) {
      // No view of the outgrown buffer is out: callers hand out views of the last window only.
      if (this.#windows !== null && this.#buf.length > 0) this.#windows.give(this.#buf);
      this.#buf = this.#windows !== null ? this.#windows.take(want) : new Uint8Array(want);
    }
    const got = want > 0 ? await this.#file.read(this.#buf.subarray(0, want), pos) : 0;
    this.#start = pos;
    this.#held = got;
    if (got < want) this.#dataEnd = Math.min(this.#dataEnd, pos + got);
    this.cursor.reset(this.#buf.subarray(0, got));
  }

  /**
   * Decodes the record at file position `pos` from the window, without reading: Cut if the window
   * does not hold all of it (or does not hold `pos`) and more of the range can be read.
   */
  decode(pos: number): ScanStatus {
    const windowEnd = this.#start + this.#held;
    if (pos < this.#start || pos > windowEnd)
      return pos < this.#dataEnd ? ScanStatus.Cut : ScanStatus.Incomplete;
    const status = this.cursor.decode(pos - this.#start);
    if (status === DecodeStatus.Incomplete && windowEnd < this.#dataEnd) return ScanStatus.Cut;
    return status;
  }

  /**
   * Reads a window from `pos` that holds the whole record starting there (sized by its checked
   * `record_len`; one more read when the window did not hold its length yet), and decodes it.
   * Never returns Cut.
   */
  async readRecordAt(pos: number): Promise<DecodeStatus> {
    for (let reads = 1; ; reads++) {
      await this.fill(pos, this.#bytesFor(pos));
      const status = this.decode(pos);
      if (status !== ScanStatus.Cut) return status;
      // A window of fewer than 4 bytes needs one read for the length, one for the record.
      assert(reads < 3, "a window sized to the record holds it");
    }
  }

  /**
   * Bytes a window from `pos` needs to hold the record there: its length prefix plus `record_len`
   * when the window holds the prefix (a prefix whose record decoded as cut passed the plausibility
   * check), else one window.
   */
  #bytesFor(pos: number): number {
    const at = pos - this.#start;
    if (at < 0 || at + recordLengthPrefixBytes > this.#held)
      return Math.max(this.#windowBytes, recordLengthPrefixBytes);
    const view = new DataView(this.#buf.buffer, this.#buf.byteOffset + at, recordLengthPrefixBytes);
    return recordLengthPrefixBytes + view.getUint32(0);
  }

  /**
   * If the window holds a length prefix of zeros at `pos` (space written ahead of the records:
   * `record_len` 0 never decodes): the file position of the first non-zero byte after them, or the
   * window's end. Otherwise −1.
   */
  zerosEnd(pos: number): number {
    const buf = this.#buf;
    const at = pos - this.#start;
    if (at < 0 || at + recordLengthPrefixBytes > this.#held) return -1;
    for (let i = at; i < at + recordLengthPrefixBytes; i++) if (buf[i] !== 0) return -1;
    let q = at + recordLengthPrefixBytes;
    while (q < this.#held && buf[q] === 0) q++;
    return this.#start + q;
  }

  /** A view of the file's bytes `[from, to)`, which the window must hold. */
  bytes(from: number, to: number): Uint8Array {
    return this.#buf.subarray(from - this.#start, to - this.#start);
  }
}
