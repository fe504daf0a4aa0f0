/** lib/read-slab.ts: reads copied out of the shared read buffer stay intact while they are kept. */
import { describe, expect, it } from "vitest";
import {
  copyRead,
  isSmallView,
  ownBytes,
  readSlabBytes,
  sharedReadBuffer,
  slabbedReadBytesMax,
} from "../../src/lib/read-slab.ts";

describe("copyRead", () => {
  it("hands out copies that later reads into the shared buffer never change, across slabs", () => {
    const kept: { chunk: Uint8Array; fill: number; length: number }[] = [];
    // Enough small reads to fill several slabs, and some large ones in between.
    for (let i = 0; i < 200; i++) {
      const length =
        i % 7 === 0 ? slabbedReadBytesMax + 1 + i : 1 + ((i * 37) % slabbedReadBytesMax);
      const fill = i & 0xff;
      sharedReadBuffer.fill(fill, 0, length);
      const chunk = copyRead(sharedReadBuffer.subarray(0, length));
      expect(chunk.buffer).not.toBe(sharedReadBuffer.buffer);
      kept.push({ chunk, fill, length });
      sharedReadBuffer.fill(0xff - fill);
    }
    for (const { chunk, fill, length } of kept) {
      expect(chunk.length).toBe(length);
      expect(chunk.every((b) => b === fill)).toBe(true);
    }
    // Small reads share slabs; large ones have a buffer of their own.
    const small = kept.filter((k) => k.length <= slabbedReadBytesMax);
    expect(new Set(small.map((k) => k.chunk.buffer)).size).toBeLessThan(small.length);
    for (const k of small) expect(k.chunk.buffer.byteLength).toBe(readSlabBytes);
    for (const k of kept.filter((k) => k.length > slabbedReadBytesMax))
      expect(k.chunk.buffer.byteLength).toBe(k.length);
  });

  it("ownBytes copies a small view of a larger buffer and keeps a chunk that is most of its buffer", () => {
    const big = new Uint8Array(100).map((_, i) => i);
    const view = big.subarray(10, 20);
    expect(isSmallView(view)).toBe(true);
    const own = ownBytes(view);
    expect(own.buffer).not.toBe(big.buffer);
    expect([...own]).toEqual([...view]);
    const most = big.subarray(0, 90);
    expect(ownBytes(most)).toBe(most);
  });
});
