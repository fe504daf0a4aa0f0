/**
 * The fast path of JSON produce bodies: decodes the body's bytes straight into an entry batch,
 * without turning them into a string, an object graph and UTF-8 again. A string value without
 * escapes is copied from the body into the batch as it is (the body's UTF-8 is the value's UTF-8).
 *
 * It never decides an error. It accepts only this subset of the produce grammar (`produce.ts`),
 * and answers `undefined` for anything else, valid or not, so that the general path
 * (`JSON.parse` + `decodeJsonProduce`) decodes the body or names the problem:
 *
 * ```
 * body    = ws "{" ws "\"records\"" ws ":" ws "[" ws record *( ws "," ws record ) ws "]" ws "}" ws
 * record  = "{" ws [ member *( ws "," ws member ) ] ws "}"
 * member  = name ws ":" ws ( string | "null" | integer )
 * name    = one of "key" "key_b64" "value" "value_b64" "partition" "timestamp", without escapes
 * integer = "0" | [1-9] *14[0-9] | "-1"          (at most 15 digits: always a safe integer)
 * string  = JSON string; escapes \" \\ \/ \b \f \n \r \t \uXXXX (surrogates only in pairs)
 * ws      = *( " " | "\t" | "\n" | "\r" )
 * ```
 *
 * | on top of the grammar, it gives up (`undefined`) when                         | the general path then |
 * |-------------------------------------------------------------------------------|-----------------------|
 * | a byte ≥ 0x80 anywhere and the body is not strict UTF-8                       | 400, not valid UTF-8  |
 * | a field appears twice in one object (JSON.parse would keep the last)         | decodes it            |
 * | a field has the wrong type, both key and key_b64, value and value_b64, neither value | 400 naming the field |
 * | bad base64 (or an escape in a base64 string)                                  | 400 / decodes it      |
 * | partition above the largest, a negative one, timestamp below −1               | 400 naming the field  |
 * | no record, more than `httpProduceRecordsMax`, a record over `recordPayloadBytesMax` | 400 / 413       |
 *
 * So whenever it answers, the answer is the one the general path gives (checked by
 * `test/unit/http-produce-json.test.ts`, which compares both on generated bodies).
 */
import type { EntryBatch } from "../../storage/record.ts";
import { EntryBatchBuilder } from "../../storage/record.ts";
import { Base64Error, decodeBase64 } from "../../lib/base64.ts";
import { httpProduceRecordsMax, recordPayloadBytesMax } from "../../lib/limits.ts";
import type { DecodedProduce } from "./produce.ts";
import { PartitionChoice, partitionNumberMax } from "./produce.ts";

const quote = 0x22;
const backslash = 0x5c;
const comma = 0x2c;
const colon = 0x3a;
const openBrace = 0x7b;
const closeBrace = 0x7d;
const openBracket = 0x5b;
const closeBracket = 0x5d;
const minus = 0x2d;
const digit0 = 0x30;
const digit9 = 0x39;

/** Thrown inside the scanner to give up; never escapes {@link scanJsonProduce}. */
class GiveUp {}
const giveUp = new GiveUp();

const strictUtf8 = new TextDecoder("utf-8", { fatal: true });
const utf8Decoder = new TextDecoder("utf-8");

// Field ids, one bit each, for the "seen" mask of a record.
const fieldKey = 1;
const fieldKeyB64 = 2;
const fieldValue = 4;
const fieldValueB64 = 8;
const fieldPartition = 16;
const fieldTimestamp = 32;

/** What a member's value was: a string span, null, or an integer. */
const kindString = 0;
const kindNull = 1;
const kindInteger = 2;

// Classes of the bytes inside a JSON string: 0 for one that stands for itself and needs no check.
const classQuote = 1;
const classBackslash = 2;
const classHigh = 4;
const classControl = 8;
const stringByteClass: Uint8Array = (() => {
  const table = new Uint8Array(256);
  for (let b = 0; b < 0x20; b++) table[b] = classControl;
  for (let b = 0x80; b < 0x100; b++) table[b] = classHigh;
  table[quote] = classQuote;
  table[backslash] = classBackslash;
  return table;
})();

const emptyBytes = new Uint8Array(0);
/** Buffers up to this size keep their `DataView` for the next body in them (a read slab). */
const viewedBufferBytesMax = 64 * 1024;
let viewedBuffer: ArrayBufferLike | null = null;
let viewedBufferView: DataView | null = null;

/**
 * Byte-level reader of a body: one, reused for every body ({@link reset}), since decoding is
 * synchronous and nothing of it outlives a {@link decode}.
 */
class Scanner {
  body: Uint8Array = emptyBytes;
  pos = 0;
  /** Set when a byte ≥ 0x80 was seen inside a string: the body must then be checked as UTF-8. */
  sawHighByte = false;
  // The last value read by #value():
  kind = kindNull;
  /** String value: its bytes, decoded (a view of the body when it had no escape). */
  text: Uint8Array = emptyBytes;
  /** String value: it had an escape, or a byte ≥ 0x80 (base64 must be plain ASCII). */
  textPlain = true;
  integer = 0;

  /** A DataView of the body's buffer, for reading four bytes at once, and where the body starts in it. */
  view: DataView = new DataView(new ArrayBuffer(0));
  viewBase = 0;

  /** Starts reading `body`. */
  reset(body: Uint8Array): void {
    // A plain Uint8Array view (not a Node Buffer): its subarray() is the cheaper one.
    this.body =
      body.constructor === Uint8Array
        ? body
        : new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
    this.pos = 0;
    this.sawHighByte = false;
    this.kind = kindNull;
    this.text = emptyBytes;
    this.textPlain = true;
    this.integer = 0;
    const buffer = body.buffer;
    if (buffer === viewedBuffer && viewedBufferView !== null) {
      this.view = viewedBufferView;
      this.viewBase = body.byteOffset;
    } else if (buffer.byteLength <= viewedBufferBytesMax) {
      viewedBuffer = buffer;
      viewedBufferView = new DataView(buffer);
      this.view = viewedBufferView;
      this.viewBase = body.byteOffset;
    } else {
      this.view = new DataView(buffer, body.byteOffset, body.byteLength);
      this.viewBase = 0;
    }
  }

  /** Lets go of the body (and of its buffer). */
  release(): void {
    this.body = emptyBytes;
    this.text = emptyBytes;
  }

  ws(): void {
    const body = this.body;
    let p = this.pos;
    while (p < body.length) {
      const b = body[p];
      if (b !== 0x20 && b !== 0x0a && b !== 0x0d && b !== 0x09) break;
      p++;
    }
    this.pos = p;
  }

  /** Consumes `byte` (after whitespace) or gives up. */
  expect(byte: number): void {
    this.ws();
    if (this.body[this.pos] !== byte) throw giveUp;
    this.pos++;
  }

  /** Consumes `a` or `b` (after whitespace) and says which: true for `a`. */
  either(a: number, b: number): boolean {
    this.ws();
    const c = this.body[this.pos];
    if (c === a) {
      this.pos++;
      return true;
    }
    if (c !== b) throw giveUp;
    this.pos++;
    return false;
  }

  /**
   * Reads a member name (after whitespace) and returns its field id, or 0 for `"records"`; gives
   * up on any other name (an escaped one never matches: its bytes differ).
   */
  field(): number {
    this.expect(quote);
    const body = this.body;
    const start = this.pos;
    const end = body.indexOf(quote, start);
    if (end < 0) throw giveUp;
    this.pos = end + 1;
    switch (end - start) {
      case 3:
        if (nameIs(body, start, "key")) return fieldKey;
        break;
      case 5:
        if (nameIs(body, start, "value")) return fieldValue;
        break;
      case 7:
        if (nameIs(body, start, "key_b64")) return fieldKeyB64;
        if (nameIs(body, start, "records")) return 0;
        break;
      case 9:
        if (nameIs(body, start, "value_b64")) return fieldValueB64;
        if (nameIs(body, start, "partition")) return fieldPartition;
        if (nameIs(body, start, "timestamp")) return fieldTimestamp;
        break;
    }
    throw giveUp;
  }

  /** Reads a member's value (after whitespace) into kind / text / integer. */
  value(): void {
    this.ws();
    const body = this.body;
    const b = body[this.pos];
    if (b === quote) {
      this.kind = kindString;
      this.string();
    } else if (b === 0x6e) {
      // "null"
      const p = this.pos;
      if (body[p + 1] !== 0x75 || body[p + 2] !== 0x6c || body[p + 3] !== 0x6c) throw giveUp;
      this.pos = p + 4;
      this.kind = kindNull;
    } else {
      this.kind = kindInteger;
      this.integerValue();
    }
  }

  /** A JSON string starting at the opening quote; sets text and textPlain. */
  string(): void {
    const body = this.body;
    const start = this.pos + 1;
    let p = start;
    let seen = 0; // the byte classes met, or-ed together
    const view = this.view;
    const base = this.viewBase;
    const wordEnd = body.length - 4;
    for (;;) {
      // Four bytes at a time while none is a quote, a backslash, a control byte or ≥ 0x80 (SWAR:
      // a high bit of `special` is set for each byte that may be one; no false negatives).
      while (p <= wordEnd) {
        const w = view.getUint32(base + p, true);
        const q = w ^ 0x22222222;
        const b = w ^ 0x5c5c5c5c;
        const special =
          (w | ((w - 0x20202020) & ~w) | ((q - 0x01010101) & ~q) | ((b - 0x01010101) & ~b)) &
          0x80808080;
        if (special !== 0) break;
        p += 4;
      }
      if (p >= body.length) throw giveUp;
      const c = stringByteClass[body[p]];
      if (c === 0) {
        p++;
        continue;
      }
      if (c === classQuote) break;
      if (c === classControl) throw giveUp;
      seen |= c;
      p += c === classBackslash ? 2 : 1; // an escape's second byte never ends the string
    }
    this.pos = p + 1;
    if ((seen & classHigh) !== 0) this.sawHighByte = true;
    this.textPlain = seen === 0;
    this.text =
      (seen & classBackslash) !== 0 ? unescapeJsonString(body, start, p) : body.subarray(start, p);
  }

  /** `0`, `[1-9][0-9]{0,14}` or `-1`, followed by a delimiter; anything else gives up. */
  integerValue(): void {
    const body = this.body;
    let p = this.pos;
    if (body[p] === minus) {
      if (body[p + 1] !== digit0 + 1) throw giveUp;
      this.integer = -1;
      p += 2;
    } else {
      const first = body[p];
      if (!(first >= digit0 && first <= digit9)) throw giveUp;
      let n = first - digit0;
      p++;
      if (first !== digit0) {
        const limit = p + 14;
        while (p < body.length) {
          const b = body[p];
          if (!(b >= digit0 && b <= digit9)) break;
          if (p === limit) throw giveUp;
          n = n * 10 + (b - digit0);
          p++;
        }
      }
      this.integer = n;
    }
    // Only a delimiter may follow: not a fraction, an exponent, or another digit (a leading zero).
    const next = body[p];
    if (
      next !== comma &&
      next !== closeBrace &&
      next !== 0x20 &&
      next !== 0x0a &&
      next !== 0x0d &&
      next !== 0x09
    )
      throw giveUp;
    this.pos = p;
  }
}

/** Whether the bytes at `start` are the ASCII `name` (the caller checked the length). */
function nameIs(body: Uint8Array, start: number, name: string): boolean {
  for (let i = 0; i < name.length; i++) if (body[start + i] !== name.charCodeAt(i)) return false;
  return true;
}

const hexValue: Int8Array = (() => {
  const table = new Int8Array(256).fill(-1);
  for (let i = 0; i < 10; i++) table[digit0 + i] = i;
  for (let i = 0; i < 6; i++) {
    table[0x41 + i] = 10 + i;
    table[0x61 + i] = 10 + i;
  }
  return table;
})();

function hex4(body: Uint8Array, p: number): number {
  if (p + 4 > body.length) throw giveUp;
  const a = hexValue[body[p]];
  const b = hexValue[body[p + 1]];
  const c = hexValue[body[p + 2]];
  const d = hexValue[body[p + 3]];
  if ((a | b | c | d) < 0) throw giveUp;
  return (a << 12) | (b << 8) | (c << 4) | d;
}

/**
 * The bytes of the JSON string content `body[start, end)`, escapes decoded to UTF-8; other bytes
 * are copied as they are. A decoded string is never longer than its escaped form.
 */
function unescapeJsonString(body: Uint8Array, start: number, end: number): Uint8Array {
  const out = new Uint8Array(end - start);
  let o = 0;
  let p = start;
  while (p < end) {
    const b = body[p];
    if (b !== backslash) {
      out[o++] = b;
      p++;
      continue;
    }
    const e = body[p + 1];
    p += 2;
    switch (e) {
      case quote:
      case backslash:
      case 0x2f:
        out[o++] = e;
        break;
      case 0x62:
        out[o++] = 0x08;
        break;
      case 0x66:
        out[o++] = 0x0c;
        break;
      case 0x6e:
        out[o++] = 0x0a;
        break;
      case 0x72:
        out[o++] = 0x0d;
        break;
      case 0x74:
        out[o++] = 0x09;
        break;
      case 0x75: {
        let code = hex4(body, p);
        p += 4;
        if (code >= 0xdc00 && code <= 0xdfff) throw giveUp; // a lone low surrogate
        if (code >= 0xd800 && code <= 0xdbff) {
          // Only as a pair with a low surrogate.
          if (body[p] !== backslash || body[p + 1] !== 0x75) throw giveUp;
          const low = hex4(body, p + 2);
          if (low < 0xdc00 || low > 0xdfff) throw giveUp;
          p += 6;
          code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
        }
        if (code < 0x80) out[o++] = code;
        else if (code < 0x800) {
          out[o++] = 0xc0 | (code >> 6);
          out[o++] = 0x80 | (code & 0x3f);
        } else if (code < 0x10000) {
          out[o++] = 0xe0 | (code >> 12);
          out[o++] = 0x80 | ((code >> 6) & 0x3f);
          out[o++] = 0x80 | (code & 0x3f);
        } else {
          out[o++] = 0xf0 | (code >> 18);
          out[o++] = 0x80 | ((code >> 12) & 0x3f);
          out[o++] = 0x80 | ((code >> 6) & 0x3f);
          out[o++] = 0x80 | (code & 0x3f);
        }
        break;
      }
      default:
        throw giveUp;
    }
  }
  // An escape at the very end would have run past `end`: the closing quote was escaped.
  if (p !== end) throw giveUp;
  return out.subarray(0, o);
}

/** Strict base64 of a plain (ASCII, unescaped) string value; gives up on anything else. */
function base64Value(s: Scanner): Uint8Array {
  if (!s.textPlain) throw giveUp;
  try {
    return decodeBase64(utf8Decoder.decode(s.text));
  } catch (e) {
    if (e instanceof Base64Error) throw giveUp;
    throw e;
  }
}

/** Bytes of one batch slab (below). */
const batchSlabBytes = 16 * 1024;
/** Batches whose first guess of a size is at most this are built in the slab. */
const slabbedBatchBytesMax = 2048;
/**
 * Where small batches are built, one after the other, as reads are kept in `lib/read-slab.ts`: a
 * part of it once handed out is never written again (a new slab follows a full one), so a batch
 * stays valid for as long as it is kept, and a small body costs no buffer of its own.
 */
let batchSlab = new Uint8Array(batchSlabBytes);
let batchSlabUsed = 0;

const scanner = new Scanner();

function decode(body: Uint8Array): DecodedProduce {
  const s = scanner;
  s.reset(body);
  s.expect(openBrace);
  if (s.field() !== 0) throw giveUp;
  s.expect(colon);
  s.expect(openBracket);
  // The batch: the body's size is a close upper bound for typical records (the builder grows if not).
  const capacity = body.length + 64;
  let slabbed: Uint8Array | undefined;
  if (capacity <= slabbedBatchBytesMax) {
    if (batchSlabUsed + capacity > batchSlabBytes) {
      batchSlab = new Uint8Array(batchSlabBytes);
      batchSlabUsed = 0;
    }
    slabbed = batchSlab.subarray(batchSlabUsed, batchSlabUsed + capacity);
  }
  const builder = new EntryBatchBuilder(capacity, slabbed);
  const partitions = new PartitionChoice();
  let index = 0;
  for (;;) {
    if (index === httpProduceRecordsMax) throw giveUp;
    s.expect(openBrace);
    let seen = 0;
    let key: Uint8Array | null = null;
    let value: Uint8Array | null = null;
    let partition = -1;
    let timestampMs = -1;
    if (!s.either(closeBrace, quote)) {
      s.pos--; // back to the quote: field() reads it
      for (;;) {
        const field = s.field();
        if (field === 0 || (seen & field) !== 0) throw giveUp;
        seen |= field;
        s.expect(colon);
        s.value();
        switch (field) {
          case fieldKey:
            if (s.kind === kindString) key = s.text;
            else if (s.kind !== kindNull) throw giveUp;
            break;
          case fieldKeyB64:
            if (s.kind === kindString) key = base64Value(s);
            else if (s.kind !== kindNull) throw giveUp;
            break;
          case fieldValue:
            if (s.kind !== kindString) throw giveUp;
            value = s.text;
            break;
          case fieldValueB64:
            if (s.kind !== kindString) throw giveUp;
            value = base64Value(s);
            break;
          case fieldPartition:
            if (s.kind === kindInteger) {
              if (s.integer < 0 || s.integer > partitionNumberMax) throw giveUp;
              partition = s.integer;
            } else if (s.kind !== kindNull) throw giveUp;
            break;
          case fieldTimestamp:
            if (s.kind === kindInteger) timestampMs = s.integer;
            else if (s.kind !== kindNull) throw giveUp;
            break;
        }
        if (!s.either(comma, closeBrace)) break;
      }
    }
    if ((seen & (fieldKey | fieldKeyB64)) === (fieldKey | fieldKeyB64)) throw giveUp;
    if ((seen & (fieldValue | fieldValueB64)) === (fieldValue | fieldValueB64)) throw giveUp;
    if (value === null) throw giveUp;
    if ((key === null ? 0 : key.length) + value.length > recordPayloadBytesMax) throw giveUp;
    builder.add(key, value, timestampMs);
    partitions.add(index, partition);
    index++;
    if (!s.either(comma, closeBracket)) break;
  }
  s.expect(closeBrace);
  s.ws();
  if (s.pos !== body.length) throw giveUp;
  if (s.sawHighByte) {
    try {
      strictUtf8.decode(body);
    } catch {
      throw giveUp;
    }
  }
  const batch: EntryBatch = builder.build();
  // Only now is the slab's part taken (a body given up on leaves it free), if the batch is in it.
  if (slabbed !== undefined && batch.bytes.buffer === batchSlab.buffer)
    batchSlabUsed = batch.bytes.byteOffset + batch.bytes.length;
  return { batch, ...partitions.result() };
}

/**
 * Decodes a JSON produce body from its bytes (module comment), or answers `undefined` when the
 * body is outside the fast path's grammar — then the caller decodes it the general way, which
 * also names any error. Never throws for client input.
 */
export function scanJsonProduce(body: Uint8Array): DecodedProduce | undefined {
  try {
    return decode(body);
  } catch (e) {
    if (e === giveUp) return undefined;
    throw e;
  } finally {
    scanner.release();
  }
}
