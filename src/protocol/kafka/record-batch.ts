/**
 * Kafka's RecordBatch v2 (magic 2), decoded into the broker's entry batches on Produce and encoded
 * from stored records on Fetch (docs/kafka.md "Records"). All integers big-endian:
 *
 * ```
 * offset  field                 notes
 *  0      baseOffset int64      the producer sends 0; ignored on produce
 *  8      batchLength int32     bytes after this field: the batch is 12 + batchLength bytes
 * 12      partitionLeaderEpoch int32
 * 16      magic int8            must be 2
 * 17      crc uint32            CRC-32C (Castagnoli) of bytes 21 … end
 * 21      attributes int16      bits 0–2 compression, 3 timestamp type, 4 transactional, 5 control
 * 23      lastOffsetDelta int32
 * 27      baseTimestamp int64
 * 35      maxTimestamp int64
 * 43      producerId int64      −1 = not idempotent
 * 51      producerEpoch int16
 * 53      baseSequence int32
 * 57      recordCount int32
 * 61      records               compressed as one block when bits 0–2 say so
 *
 * record = length varint | attributes int8 | timestampDelta varlong | offsetDelta varint
 *          | keyLength varint (−1 = null) | key | valueLength varint (−1 = null) | value
 *          | headerCount varint | headers (headerKeyLength varint, key, headerValueLength varint, value)
 * ```
 *
 * Varints are zigzag (protobuf `sint32`/`sint64`): at most 5 bytes, varlongs at most 10; a longer
 * one is corrupt. Decoding checks the CRC before reading any record, the record count against the
 * bytes present before making anything of that size, each record's length against the bytes left,
 * and that every record ends exactly where its length says.
 *
 * Mapping (docs/kafka.md "What is mapped how"): a record's key and value become the stored key
 * and value (a null key stays "no key"; a null value is stored as the empty value, the broker's
 * tombstone); its timestamp is baseTimestamp + timestampDelta (−1 when the batch has none, so
 * the broker stamps it). Headers cannot be stored (docs/storage.md "Records" has no place for them):
 * a record with headers is refused (INVALID_RECORD). Transactional and control batches are refused
 * the same way. A Fetch answer is one uncompressed batch per partition, with producer id −1.
 */
import * as crc32cModule from "crc-32/crc32c.js";
import { readI64, readU64, viewOf, writeI64 } from "../../lib/bytes.ts";
import { entryOverheadBytes, type EntryBatch } from "../../storage/record.ts";
import {
  type CompressionCodec,
  compressionCodec,
  DecompressError,
  decompress,
  type Gunzip,
} from "./compression.ts";

// Deno exposes crc-32's UMD exports as `default` only (see lib/crc32.ts).
type Crc32c = { buf(data: Uint8Array, seed?: number): number };
const crcModule = crc32cModule as unknown as Crc32c & { default?: Crc32c };
const crc32cBuf = typeof crcModule.buf === "function" ? crcModule.buf : crcModule.default!.buf;

/** CRC-32C (Castagnoli) of `bytes`, unsigned (`"123456789"` → 0xe3069283). */
export function crc32c(bytes: Uint8Array): number {
  return crc32cBuf(bytes, 0) >>> 0;
}

/** Bytes of a RecordBatch v2 before its records. */
export const batchHeaderBytes = 61;
/** Bytes from the start of a batch to the first byte its CRC covers (attributes). */
const crcStart = 21;
/** The smallest encoded record: length, attributes, three one-byte varints, two −1 lengths, header count. */
const recordBytesMin = 7;

/** Why a batch was refused, with the Kafka error code the partition answer carries. */
export class RecordBatchError extends Error {
  override name = "RecordBatchError";
  /**
   * @param kafkaCode CORRUPT_MESSAGE 2, MESSAGE_TOO_LARGE 10, UNSUPPORTED_FOR_MESSAGE_FORMAT 43,
   *   UNSUPPORTED_COMPRESSION_TYPE 76 or INVALID_RECORD 87.
   */
  constructor(
    readonly kafkaCode: number,
    message: string,
  ) {
    super(message);
  }
}

/** Kafka error codes a batch may be refused with. */
export const BatchErrorCode = {
  corruptMessage: 2,
  messageTooLarge: 10,
  unsupportedForMessageFormat: 43,
  unsupportedCompressionType: 76,
  invalidRecord: 87,
} as const;

/** A decoded produce batch. */
export interface DecodedBatch {
  /** −1 when the producer is not idempotent. */
  producerId: number;
  producerEpoch: number;
  baseSequence: number;
  codec: CompressionCodec;
  /** The records as an entry batch (storage/record.ts), ready to append. */
  entries: EntryBatch;
}

/** Limits of {@link decodeRecordBatch}. */
export interface DecodeBatchOptions {
  /** Largest decompressed records section, in bytes (the request cap). */
  maxUncompressedBytes: number;
  /** Most records in one batch. */
  maxRecords: number;
  /** Largest key + value of one record, in bytes. */
  maxRecordPayloadBytes: number;
  /** gzip inflation, from the runtime layer. */
  gunzip: Gunzip;
}

/**
 * Decodes the `records` field of one partition of a Produce request: exactly one RecordBatch v2
 * (Kafka refuses more than one from Produce v3 on).
 * @throws RecordBatchError with the Kafka error code for the partition's answer.
 */
export function decodeRecordBatch(bytes: Uint8Array, options: DecodeBatchOptions): DecodedBatch {
  const corrupt = (why: string): never => {
    throw new RecordBatchError(BatchErrorCode.corruptMessage, `Cannot decode record batch: ${why}`);
  };
  const invalid = (why: string): never => {
    throw new RecordBatchError(BatchErrorCode.invalidRecord, `Cannot accept record batch: ${why}`);
  };
  if (bytes.length < batchHeaderBytes)
    corrupt(`${bytes.length} bytes, shorter than the ${batchHeaderBytes}-byte header`);
  const view = viewOf(bytes);
  const batchLength = view.getInt32(8);
  if (batchLength !== bytes.length - 12) {
    if (batchLength < bytes.length - 12 && batchLength >= batchHeaderBytes - 12)
      invalid("a produce request must carry exactly one record batch per partition");
    corrupt(
      `batchLength ${batchLength} does not match the ${bytes.length - 12} bytes that follow it`,
    );
  }
  const magic = view.getInt8(16);
  if (magic !== 2)
    throw new RecordBatchError(
      BatchErrorCode.unsupportedForMessageFormat,
      `Cannot accept record batch: magic ${magic}, only 2 (RecordBatch v2) is supported`,
    );
  const crc = view.getUint32(17);
  const actual = crc32c(bytes.subarray(crcStart));
  if (crc !== actual)
    corrupt(
      `CRC-32C is 0x${actual.toString(16).padStart(8, "0")}, the batch says 0x${crc.toString(16).padStart(8, "0")}`,
    );
  const attributes = view.getInt16(21);
  if ((attributes & 0x10) !== 0) invalid("transactional batches are not supported");
  if ((attributes & 0x20) !== 0) invalid("control batches are not supported");
  const codec = compressionCodec(attributes);
  if (codec === null)
    throw new RecordBatchError(
      BatchErrorCode.unsupportedCompressionType,
      `Cannot accept record batch: compression code ${attributes & 7} is unknown`,
    );
  const lastOffsetDelta = view.getInt32(23);
  const baseTimestamp = safeI64(view, 27, "baseTimestamp", corrupt);
  const producerId = safeI64(view, 43, "producerId", corrupt);
  const producerEpoch = view.getInt16(51);
  const baseSequence = view.getInt32(53);
  const recordCount = view.getInt32(57);
  if (recordCount < 1) corrupt(`recordCount ${recordCount}: a batch holds at least one record`);
  if (recordCount > options.maxRecords)
    throw new RecordBatchError(
      BatchErrorCode.messageTooLarge,
      `Cannot accept record batch: ${recordCount} records, more than ${options.maxRecords}`,
    );
  if (lastOffsetDelta !== recordCount - 1)
    invalid(`lastOffsetDelta ${lastOffsetDelta} does not match recordCount ${recordCount}`);
  let records = bytes.subarray(batchHeaderBytes);
  if (codec !== "none") {
    try {
      records = decompress(codec, records, {
        maxBytes: options.maxUncompressedBytes,
        gunzip: options.gunzip,
      });
    } catch (err) {
      if (!(err instanceof DecompressError)) throw err;
      if (codec === "zstd")
        throw new RecordBatchError(
          BatchErrorCode.unsupportedCompressionType,
          `Cannot accept record batch: ${err.message}`,
        );
      throw new RecordBatchError(
        err.tooLarge ? BatchErrorCode.messageTooLarge : BatchErrorCode.corruptMessage,
        `Cannot decode record batch: ${err.message}`,
      );
    }
  }
  if (recordCount * recordBytesMin > records.length)
    corrupt(`recordCount ${recordCount} cannot fit in ${records.length} bytes of records`);
  const entries = parseRecords(records, {
    count: recordCount,
    baseTimestamp,
    maxPayloadBytes: options.maxRecordPayloadBytes,
    corrupt,
    invalid,
    tooLarge: (why) => {
      throw new RecordBatchError(
        BatchErrorCode.messageTooLarge,
        `Cannot accept record batch: ${why}`,
      );
    },
  });
  return { producerId, producerEpoch, baseSequence, codec, entries };
}

function safeI64(
  view: DataView,
  at: number,
  field: string,
  corrupt: (why: string) => never,
): number {
  const hi = view.getInt32(at);
  if (hi < -0x20_0000 || hi > 0x1f_ffff) corrupt(`${field} is outside ±(2^53 - 1)`);
  const v = readI64(view, at);
  if (!Number.isSafeInteger(v)) corrupt(`${field} is outside ±(2^53 - 1)`);
  return v;
}

/** A zigzag varint reader over one buffer, bounded to 5 bytes (varint) or 10 (varlong). */
class VarintReader {
  pos = 0;
  constructor(
    readonly bytes: Uint8Array,
    readonly corrupt: (why: string) => never,
  ) {}

  /**
   * A zigzag varint (int32). `field` and `record` (its index, or −1) name it in the error only:
   * no string is built on the way that succeeds (this runs several times per record).
   */
  varint(field: string, record = -1): number {
    const b = this.bytes;
    const p = this.pos;
    // One or two bytes, the common cases (deltas and counts; lengths below 8 KiB).
    if (p + 1 < b.length || (p < b.length && (b[p] & 0x80) === 0)) {
      const first = b[p];
      if ((first & 0x80) === 0) {
        this.pos = p + 1;
        return (first & 1) === 0 ? first >>> 1 : -((first + 1) >>> 1);
      }
      const second = b[p + 1];
      if ((second & 0x80) === 0) {
        this.pos = p + 2;
        const two = (first & 0x7f) | (second << 7);
        return (two & 1) === 0 ? two >>> 1 : -((two + 1) >>> 1);
      }
    }
    let raw = 0;
    let scale = 1;
    for (let i = 0; ; i++) {
      if (i === 5) this.corrupt(`${name(field, record)} is a varint longer than 5 bytes`);
      if (this.pos >= b.length) this.corrupt(`${name(field, record)} is cut off`);
      const byte = b[this.pos++];
      raw += (byte & 0x7f) * scale;
      scale *= 128;
      if ((byte & 0x80) === 0) break;
    }
    if (raw > 0xffff_ffff) this.corrupt(`${name(field, record)} is a varint above 32 bits`);
    // zigzag: even → n/2, odd → −(n+1)/2.
    return raw % 2 === 0 ? raw / 2 : -(raw + 1) / 2;
  }

  /** A zigzag varlong (int64), which must be within ±(2^53 − 1). */
  varlong(field: string, record = -1): number {
    const b = this.bytes;
    let raw = 0n;
    let shift = 0n;
    for (let i = 0; ; i++) {
      if (i === 10) this.corrupt(`${name(field, record)} is a varlong longer than 10 bytes`);
      if (this.pos >= b.length) this.corrupt(`${name(field, record)} is cut off`);
      const byte = b[this.pos++];
      raw |= BigInt(byte & 0x7f) << shift;
      shift += 7n;
      if ((byte & 0x80) === 0) break;
    }
    const value = (raw & 1n) === 0n ? raw >> 1n : -((raw + 1n) >> 1n);
    if (value > BigInt(Number.MAX_SAFE_INTEGER) || value < -BigInt(Number.MAX_SAFE_INTEGER))
      this.corrupt(`${name(field, record)} is outside ±(2^53 - 1)`);
    return Number(value);
  }
}

/** How an error names a field: `record 3 keyLength`, or the field alone. */
function name(field: string, record: number): string {
  return record >= 0 ? `record ${record} ${field}` : field;
}

/** Fast path of {@link VarintReader.varlong} for the common one-byte deltas. */
function readVarlong(r: VarintReader, field: string, record = -1): number {
  const b = r.bytes;
  const p = r.pos;
  if (p < b.length && (b[p] & 0x80) === 0) {
    r.pos = p + 1;
    const raw = b[p];
    return raw % 2 === 0 ? raw / 2 : -(raw + 1) / 2;
  }
  return r.varlong(field, record);
}

function parseRecords(
  records: Uint8Array,
  p: {
    count: number;
    baseTimestamp: number;
    maxPayloadBytes: number;
    corrupt: (why: string) => never;
    invalid: (why: string) => never;
    tooLarge: (why: string) => never;
  },
): EntryBatch {
  // Pass 1: check every record and size the entry batch exactly.
  const r = new VarintReader(records, p.corrupt);
  let entryBytes = 0;
  for (let i = 0; i < p.count; i++) {
    // Messages are built only when a check fails (`record ${i}`): this loop runs per record.
    const length = r.varint("length", i);
    if (length < 0 || length > records.length - r.pos)
      p.corrupt(`record ${i} claims ${length} bytes, but ${records.length - r.pos} remain`);
    const end = r.pos + length;
    r.pos++; // attributes
    readVarlong(r, "timestampDelta", i);
    const offsetDelta = r.varint("offsetDelta", i);
    if (offsetDelta !== i)
      p.invalid(`record ${i} has offsetDelta ${offsetDelta}; inner offsets must be consecutive`);
    const keyLength = r.varint("keyLength", i);
    if (keyLength < -1 || keyLength > end - r.pos)
      p.corrupt(`record ${i} keyLength ${keyLength} runs past the record`);
    r.pos += Math.max(0, keyLength);
    const valueLength = r.varint("valueLength", i);
    if (valueLength < -1 || valueLength > end - r.pos)
      p.corrupt(`record ${i} valueLength ${valueLength} runs past the record`);
    r.pos += Math.max(0, valueLength);
    const headerCount = r.varint("headerCount", i);
    if (headerCount < 0) p.corrupt(`record ${i} headerCount ${headerCount}`);
    if (headerCount > 0)
      p.invalid(`record ${i} has ${headerCount} headers; record headers cannot be stored`);
    if (r.pos !== end)
      p.corrupt(`record ${i} ends at byte ${r.pos - (end - length)}, its length says ${length}`);
    const payload = Math.max(0, keyLength) + Math.max(0, valueLength);
    if (payload > p.maxPayloadBytes)
      p.tooLarge(
        `record ${i} is ${payload} bytes of key and value, over the limit of ${p.maxPayloadBytes}`,
      );
    entryBytes += entryOverheadBytes + payload;
  }
  if (r.pos !== records.length) p.corrupt(`${records.length - r.pos} bytes follow the last record`);

  // Pass 2: copy into the entry batch (storage/record.ts: timestamp, key_len, key, value_len, value).
  const out = new Uint8Array(entryBytes);
  const view = viewOf(out);
  const noTimestamp = p.baseTimestamp === -1;
  r.pos = 0;
  let at = 0;
  for (let i = 0; i < p.count; i++) {
    r.varint("length");
    r.pos++;
    const delta = readVarlong(r, "timestampDelta");
    r.varint("offsetDelta");
    const timestamp = noTimestamp ? -1 : p.baseTimestamp + delta;
    if (!noTimestamp && !(timestamp >= 0 && Number.isSafeInteger(timestamp)))
      p.invalid(`record ${i} has timestamp ${timestamp}: must be ≥ 0`);
    // writeI64 without its BigInt (one per record): −1 or a safe integer ≥ 0.
    const high = Math.floor(timestamp / 0x1_0000_0000);
    view.setInt32(at, high);
    view.setUint32(at + 4, timestamp - high * 0x1_0000_0000);
    const keyLength = r.varint("keyLength");
    view.setInt32(at + 8, keyLength);
    at += 12;
    if (keyLength > 0) {
      out.set(records.subarray(r.pos, r.pos + keyLength), at);
      r.pos += keyLength;
      at += keyLength;
    }
    const valueLength = r.varint("valueLength");
    const valueBytes = Math.max(0, valueLength);
    view.setUint32(at, valueBytes);
    at += 4;
    if (valueBytes > 0) {
      out.set(records.subarray(r.pos, r.pos + valueBytes), at);
      r.pos += valueBytes;
      at += valueBytes;
    }
    r.varint("headerCount");
  }
  return { bytes: out, count: p.count };
}

// ---------------------------------------------------------------------------------------------
// Encoding (Fetch)

function varintBytes(zigzag: number): number {
  let n = 1;
  while (zigzag >= 128) {
    zigzag = Math.floor(zigzag / 128);
    n++;
  }
  return n;
}

function zigzag(v: number): number {
  return v >= 0 ? v * 2 : -v * 2 - 1;
}

function putVarint(out: Uint8Array, at: number, v: number): number {
  let z = zigzag(v);
  while (z >= 128) {
    out[at++] = (z % 128) | 0x80;
    z = Math.floor(z / 128);
  }
  out[at++] = z;
  return at;
}

/**
 * Stored records (docs/storage.md "Records": record_len u32, offset u64, timestamp i64, key_len
 * i32, key, value_len u32, value, crc u32), back to back, as a fetch returns them.
 */
export interface StoredRecords {
  bytes: Uint8Array;
  count: number;
}

/**
 * Encodes stored records as one uncompressed RecordBatch v2 (producer id −1, CreateTime): base
 * offset the first record's, base timestamp the smallest, offset deltas from the stored offsets
 * (compaction gaps stay gaps). Empty input gives an empty array.
 */
export function encodeRecordBatch(stored: StoredRecords): Uint8Array {
  if (stored.count === 0) return new Uint8Array(0);
  const src = stored.bytes;
  const sv = viewOf(src);
  // Pass 1: base offset and timestamp, and the encoded size.
  let pos = 0;
  const baseOffset = readU64(sv, 4);
  let lastOffset = baseOffset;
  let minTs = Number.MAX_SAFE_INTEGER;
  let maxTs = -1;
  for (let i = 0; i < stored.count; i++) {
    const len = sv.getUint32(pos);
    const ts = readI64(sv, pos + 12);
    lastOffset = readU64(sv, pos + 4);
    if (ts < minTs) minTs = ts;
    if (ts > maxTs) maxTs = ts;
    pos += 4 + len;
  }
  let size = batchHeaderBytes;
  pos = 0;
  for (let i = 0; i < stored.count; i++) {
    const len = sv.getUint32(pos);
    const offset = readU64(sv, pos + 4);
    const ts = readI64(sv, pos + 12);
    const keyLen = sv.getInt32(pos + 20);
    const keyBytes = Math.max(0, keyLen);
    const valueLen = sv.getUint32(pos + 24 + keyBytes);
    const body =
      1 +
      varintBytes(zigzag(ts - minTs)) +
      varintBytes(zigzag(offset - baseOffset)) +
      varintBytes(zigzag(keyLen)) +
      keyBytes +
      varintBytes(zigzag(valueLen)) +
      valueLen +
      1;
    size += varintBytes(zigzag(body)) + body;
    pos += 4 + len;
  }
  // Pass 2: write.
  const out = new Uint8Array(size);
  const ov = viewOf(out);
  writeI64(ov, 0, baseOffset);
  ov.setInt32(8, size - 12);
  ov.setInt32(12, 0);
  ov.setInt8(16, 2);
  ov.setInt16(21, 0);
  ov.setInt32(23, lastOffset - baseOffset);
  writeI64(ov, 27, minTs);
  writeI64(ov, 35, maxTs);
  writeI64(ov, 43, -1);
  ov.setInt16(51, -1);
  ov.setInt32(53, -1);
  ov.setInt32(57, stored.count);
  let at = batchHeaderBytes;
  pos = 0;
  for (let i = 0; i < stored.count; i++) {
    const len = sv.getUint32(pos);
    const offset = readU64(sv, pos + 4);
    const ts = readI64(sv, pos + 12);
    const keyLen = sv.getInt32(pos + 20);
    const keyBytes = Math.max(0, keyLen);
    const valueLen = sv.getUint32(pos + 24 + keyBytes);
    const body =
      1 +
      varintBytes(zigzag(ts - minTs)) +
      varintBytes(zigzag(offset - baseOffset)) +
      varintBytes(zigzag(keyLen)) +
      keyBytes +
      varintBytes(zigzag(valueLen)) +
      valueLen +
      1;
    at = putVarint(out, at, body);
    out[at++] = 0;
    at = putVarint(out, at, ts - minTs);
    at = putVarint(out, at, offset - baseOffset);
    at = putVarint(out, at, keyLen);
    if (keyBytes > 0) {
      out.set(src.subarray(pos + 24, pos + 24 + keyBytes), at);
      at += keyBytes;
    }
    at = putVarint(out, at, valueLen);
    if (valueLen > 0) {
      const v = pos + 28 + keyBytes;
      out.set(src.subarray(v, v + valueLen), at);
      at += valueLen;
    }
    out[at++] = 0;
    pos += 4 + len;
  }
  ov.setUint32(17, crc32c(out.subarray(crcStart)));
  return out;
}
