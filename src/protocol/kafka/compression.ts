/**
 * Decompression of the records of a Kafka RecordBatch (docs/kafka.md "Compression"). The
 * attributes' low three bits name the codec: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.
 *
 * - gzip: a function handed in by the runtime layer (`runtime/kafka-gzip.ts`, `node:zlib`, which
 *   stops at `maxBytes` of output).
 * - snappy: npm `snappyjs`. Raw snappy (librdkafka) or Xerial framing (Java clients: the magic
 *   `\x82SNAPPY\0`, two int32 versions, then blocks of int32 length + raw snappy). Each raw block
 *   states its length in a varint before anything is inflated; the sum is bounded by `maxBytes`.
 * - lz4: npm `lz4js` over an LZ4 frame (the format RecordBatch v2 uses). `lz4js` checks
 *   little, so the frame is walked here first: magic, version, no dictionary, every block size
 *   within the block maximum and within the input, end mark, optional checksums; the output buffer
 *   is at most `maxBytes` and a frame that would write past it is refused.
 * - zstd: refused with UNSUPPORTED_COMPRESSION_TYPE, as Kafka refuses it below Produce v7
 *   (this listener speaks Produce 3).
 *
 * Only decompression lives here: Fetch answers are always uncompressed.
 */
import * as lz4Module from "lz4js";
import * as snappyModule from "snappyjs";

/** A codec of the RecordBatch attributes. */
export type CompressionCodec = "none" | "gzip" | "snappy" | "lz4" | "zstd";

/** The codec of attribute bits 0–2; null for the unused values 5–7. */
export function compressionCodec(attributes: number): CompressionCodec | null {
  return (["none", "gzip", "snappy", "lz4", "zstd"] as const)[attributes & 7] ?? null;
}

/**
 * Inflates gzip (one or more members) into at most `maxBytes`.
 * @throws DecompressError (or any Error, taken as corrupt input).
 */
export type Gunzip = (input: Uint8Array, maxBytes: number) => Uint8Array;

/** Why decompression failed: `tooLarge` when the output would pass `maxBytes`, else corrupt input. */
export class DecompressError extends Error {
  override name = "DecompressError";
  constructor(
    message: string,
    readonly tooLarge: boolean,
  ) {
    super(message);
  }
}

// Deno exposes the CommonJS exports of these packages under `default` only (as with crc-32).
type Lz4 = typeof lz4Module;
type Snappy = typeof snappyModule;
const lz4: Lz4 =
  typeof lz4Module.decompressFrame === "function"
    ? lz4Module
    : (lz4Module as unknown as { default: Lz4 }).default;
const snappy: Snappy =
  typeof snappyModule.uncompress === "function"
    ? snappyModule
    : (snappyModule as unknown as { default: Snappy }).default;

/**
 * Decompresses `input` compressed with `codec` into at most `maxBytes`.
 * @throws DecompressError: `tooLarge` past `maxBytes`, otherwise corrupt input or zstd.
 */
export function decompress(
  codec: Exclude<CompressionCodec, "none">,
  input: Uint8Array,
  options: { maxBytes: number; gunzip: Gunzip },
): Uint8Array {
  const { maxBytes } = options;
  switch (codec) {
    case "gzip":
      try {
        return options.gunzip(input, maxBytes);
      } catch (err) {
        if (err instanceof DecompressError) throw err;
        throw new DecompressError(`gzip data is corrupt: ${(err as Error).message}`, false);
      }
    case "snappy":
      return inflateSnappy(input, maxBytes);
    case "lz4":
      return inflateLz4(input, maxBytes);
    case "zstd":
      throw new DecompressError("zstd needs Produce v7, and this broker speaks Produce v3", false);
  }
}

const xerialMagic = [0x82, 0x53, 0x4e, 0x41, 0x50, 0x50, 0x59, 0x00];

function isXerial(input: Uint8Array): boolean {
  return input.length >= 16 && xerialMagic.every((b, i) => input[i] === b);
}

/** The length a raw snappy block states in its varint preamble, or −1 if unreadable. */
function snappyLength(block: Uint8Array): number {
  let value = 0;
  for (let i = 0; i < 5 && i < block.length; i++) {
    const b = block[i];
    value += (b & 0x7f) * 2 ** (7 * i);
    if ((b & 0x80) === 0) return value;
  }
  return -1;
}

function inflateSnappy(input: Uint8Array, maxBytes: number): Uint8Array {
  const blocks: Uint8Array[] = [];
  if (isXerial(input)) {
    const view = new DataView(input.buffer, input.byteOffset, input.byteLength);
    let pos = 16;
    while (pos < input.length) {
      if (input.length - pos < 4)
        throw new DecompressError("snappy block length is cut off", false);
      const length = view.getInt32(pos);
      pos += 4;
      if (length < 0 || length > input.length - pos)
        throw new DecompressError(`snappy block of ${length} bytes runs past the data`, false);
      blocks.push(input.subarray(pos, pos + length));
      pos += length;
    }
  } else {
    blocks.push(input);
  }
  let total = 0;
  for (const block of blocks) {
    const length = snappyLength(block);
    if (length < 0) throw new DecompressError("snappy length preamble is corrupt", false);
    total += length;
    if (total > maxBytes)
      throw new DecompressError(`snappy data inflates past ${maxBytes} bytes`, true);
  }
  const parts: Uint8Array[] = [];
  for (const block of blocks) {
    try {
      parts.push(snappy.uncompress(block, maxBytes));
    } catch (err) {
      throw new DecompressError(`snappy data is corrupt: ${(err as Error).message}`, false);
    }
  }
  if (parts.length === 1) return parts[0];
  const out = new Uint8Array(total);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out.subarray(0, at);
}

const lz4Magic = 0x184d2204;
/** Block maximum sizes by the BD byte's bits 4–6 (values 4–7). */
const lz4BlockMax: Record<number, number> = { 4: 64 * 1024, 5: 256 * 1024, 6: 1 << 20, 7: 4 << 20 };

function inflateLz4(input: Uint8Array, maxBytes: number): Uint8Array {
  const fail = (why: string): never => {
    throw new DecompressError(`lz4 frame is corrupt: ${why}`, false);
  };
  const view = new DataView(input.buffer, input.byteOffset, input.byteLength);
  if (input.length < 7 || view.getUint32(0, true) !== lz4Magic) fail("no LZ4 frame magic");
  const flg = input[4];
  if (flg >> 6 !== 1) fail(`version ${flg >> 6}`);
  if ((flg & 1) !== 0) fail("dictionary ids are not supported");
  const blockSums = (flg & 0x10) !== 0;
  const contentSize = (flg & 0x08) !== 0;
  const contentSum = (flg & 0x04) !== 0;
  const blockMax = lz4BlockMax[(input[5] >> 4) & 7];
  if (blockMax === undefined) fail(`block size code ${(input[5] >> 4) & 7}`);
  let pos = 6 + (contentSize ? 8 : 0) + 1;
  let bound = 0;
  for (;;) {
    if (input.length - pos < 4) fail("block header is cut off");
    const word = view.getUint32(pos, true);
    pos += 4;
    if (word === 0) break;
    const size = word & 0x7fff_ffff;
    if (size > blockMax) fail(`block of ${size} bytes is over the frame's ${blockMax}`);
    if (size + (blockSums ? 4 : 0) > input.length - pos) fail("block runs past the data");
    pos += size + (blockSums ? 4 : 0);
    bound += (word & 0x8000_0000) !== 0 ? size : blockMax;
  }
  if (contentSum) pos += 4;
  if (pos > input.length) fail("content checksum is cut off");
  const dst = new Uint8Array(Math.min(bound, maxBytes));
  let written: number;
  try {
    written = lz4.decompressFrame(input, dst);
  } catch (err) {
    return fail((err as Error).message);
  }
  if (!(written >= 0)) fail("block data is invalid");
  if (written > dst.length)
    throw new DecompressError(`lz4 data inflates past ${maxBytes} bytes`, true);
  return dst.subarray(0, written);
}
