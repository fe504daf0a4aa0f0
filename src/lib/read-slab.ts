/**
 * Reads into one shared buffer, copied out into slabs: what a socket layer on Node uses instead of
 * a fresh buffer per read (`runtime/tcp.ts` for the broker's connections, `client/client.ts` for
 * the client's). Every socket reads into {@link sharedReadBuffer} (`onread`), and each read is
 * copied out at once with {@link copyRead}, before the next read can land there.
 *
 * A read of at most {@link slabbedReadBytesMax} bytes becomes a view of the current slab, never
 * overwritten (a new slab follows a full one), so a chunk stays valid for as long as it is kept;
 * a larger read gets a buffer of its own. Whoever keeps a small chunk for long (bytes waiting for
 * the rest of their frame, records handed to a caller) copies it out (`FrameDecoder.compact`), so
 * that it does not keep a whole slab alive.
 */

/** Bytes of the buffer every socket reads into. */
export const sharedReadBufferBytes = 64 * 1024;
/** Bytes of one slab. */
export const readSlabBytes = 16 * 1024;
/** Reads up to this size are copied into the slab; larger ones into a buffer of their own. */
export const slabbedReadBytesMax = 1024;

/** The buffer every shared-read socket reads into; each read is copied out before the next. */
export const sharedReadBuffer = new Uint8Array(sharedReadBufferBytes);

let slab = new Uint8Array(readSlabBytes);
let slabUsed = 0;

/** A copy of `bytes` (a read just landed in {@link sharedReadBuffer}) that the caller may keep. */
export function copyRead(bytes: Uint8Array): Uint8Array {
  const n = bytes.length;
  // Not `bytes.slice()`: on a Node Buffer that is a view of the shared buffer, not a copy.
  if (n > slabbedReadBytesMax) {
    const own = new Uint8Array(n);
    own.set(bytes);
    return own;
  }
  if (slabUsed + n > readSlabBytes) {
    slab = new Uint8Array(readSlabBytes);
    slabUsed = 0;
  }
  const at = slabUsed;
  slab.set(bytes, at);
  slabUsed = at + n;
  return slab.subarray(at, at + n);
}

/** True for a chunk that is at most half of the buffer it views (a slab's slice, say). */
export function isSmallView(chunk: Uint8Array): boolean {
  return chunk.byteLength * 2 <= chunk.buffer.byteLength;
}

/** `chunk` itself, or a copy of it with a buffer of its own if it {@link isSmallView}. */
export function ownBytes(chunk: Uint8Array): Uint8Array {
  if (!isSmallView(chunk)) return chunk;
  const own = new Uint8Array(chunk.byteLength);
  own.set(chunk);
  return own;
}
