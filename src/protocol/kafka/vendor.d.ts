// Types of the two untyped decompression libraries the Kafka codec uses (compression.ts).

declare module "snappyjs" {
  /** Decompresses raw snappy; throws if the stated length is over `maxLength`. */
  export function uncompress(compressed: Uint8Array, maxLength?: number): Uint8Array;
  export function compress(uncompressed: Uint8Array): Uint8Array;
}

declare module "lz4js" {
  /** Decompresses an LZ4 frame into `dst`; returns the bytes written (may exceed dst's length: writes past it are dropped). */
  export function decompressFrame(src: Uint8Array, dst: Uint8Array): number;
  export function compress(src: Uint8Array, maxSize?: number): Uint8Array;
  export function decompress(src: Uint8Array, maxSize?: number): Uint8Array;
}
