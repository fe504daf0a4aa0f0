/**
 * The buffers group writes encode their records into (`Segment.prepareAppend`), reused rather than
 * allocated per write: a fresh buffer of up to `appendBufferPooledBytesMax` per write leaves dead
 * ArrayBuffers waiting for the garbage collector's next full collection and fragments the
 * allocator's heap (docs/storage.md, Writes, group commit and visibility).
 *
 * A buffer is in use from `prepareAppend` until the partition releases it after the write. With
 * synchronous writes (NodeFileSystem) that is usually one turn of the event loop, so one or two
 * buffers serve every partition. But a group with an idempotent producer holds its buffer across
 * the journal's fsync (`AppendOptions.beforeWrite`), so every partition may hold one at once: a
 * new buffer is therefore never more than twice the group's bytes (or one
 * `appendBufferStepBytes` over), or a one-record write on each of many partitions would allocate
 * a MiB apiece. Memory held while idle: at most `appendBuffersRetainedMax` ×
 * `appendBufferPooledBytesMax`.
 */
import { assert } from "../lib/assert.ts";
import {
  appendBufferPooledBytesMax,
  appendBufferStepBytes,
  appendBuffersRetainedMax,
} from "../lib/limits.ts";

/** The free buffers, shared by every partition of the process. */
const free: Uint8Array[] = [];

/**
 * A buffer of at least `size` bytes (contents unspecified): the smallest free one that fits, else
 * a new one rounded up to whole `appendBufferStepBytes`, or under that to the next power of two.
 * Hand it back with {@link releaseAppendBuffer} once no view of it is in use.
 */
export function acquireAppendBuffer(size: number): Uint8Array {
  let best = -1;
  for (let i = 0; i < free.length; i++) {
    if (free[i].length >= size && (best < 0 || free[i].length < free[best].length)) best = i;
  }
  if (best >= 0) return free.splice(best, 1)[0];
  if (size > appendBufferPooledBytesMax) return new Uint8Array(size);
  if (size <= appendBufferStepBytes) {
    let bytes = 1;
    while (bytes < size) bytes *= 2;
    return new Uint8Array(bytes);
  }
  return new Uint8Array(
    Math.min(
      appendBufferPooledBytesMax,
      Math.ceil(size / appendBufferStepBytes) * appendBufferStepBytes,
    ),
  );
}

/**
 * Keeps `buf` for reuse (the caller holds no view of it any more), dropping the smallest free one
 * if more than `appendBuffersRetainedMax` are kept; a buffer over `appendBufferPooledBytesMax` is
 * dropped. Releasing a buffer twice is a programming error (asserted).
 */
export function releaseAppendBuffer(buf: Uint8Array): void {
  if (buf.length > appendBufferPooledBytesMax) return;
  assert(!free.includes(buf), "an append buffer is released once");
  free.push(buf);
  if (free.length > appendBuffersRetainedMax) {
    let smallest = 0;
    for (let i = 1; i < free.length; i++) if (free[i].length < free[smallest].length) smallest = i;
    free.splice(smallest, 1);
  }
}
