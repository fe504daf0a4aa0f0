/**
 * Read windows kept for reuse (docs/storage.md "Index and reads"). A fetch reads its records into
 * a window of a few hundred KiB and answers with a view of it; a new window per fetch costs the
 * allocator fresh pages (faulted in, zeroed, given back) and the collector an external buffer to
 * track. A front door that knows when the answer's bytes have left (the TCP transport, once its
 * socket write completed) gives the window back (`FetchResult.release`), and the next read takes
 * it from here. A window nobody gives back is simply collected.
 *
 * The contract that keeps this safe: a window is given back at most once, by its only holder,
 * after the last use of every view of it. {@link ReadWindows.give} also refuses a buffer it
 * already holds, so a double give cannot hand one window to two reads.
 */
import { readWindowKeptBytesMax, readWindowsKeptMax } from "../lib/limits.ts";

/** A bounded set of buffers kept for reuse: at most `keptMax`, each at most `bytesMax` bytes. */
export class ReadWindows {
  readonly #kept: Uint8Array[] = [];
  readonly #keptMax: number;
  readonly #bytesMax: number;

  constructor(options: { keptMax: number; bytesMax: number }) {
    this.#keptMax = options.keptMax;
    this.#bytesMax = options.bytesMax;
  }

  /** Buffers kept now. */
  get keptCount(): number {
    return this.#kept.length;
  }

  /**
   * A buffer of at least `bytes` bytes: the smallest kept one that fits (its contents are
   * whatever the last read left there), or a new zeroed one of exactly `bytes`.
   */
  take(bytes: number): Uint8Array {
    const kept = this.#kept;
    let best = -1;
    for (let i = 0; i < kept.length; i++)
      if (kept[i].length >= bytes && (best < 0 || kept[i].length < kept[best].length)) best = i;
    if (best < 0) return new Uint8Array(bytes);
    const buffer = kept[best];
    kept[best] = kept[kept.length - 1];
    kept.pop();
    return buffer;
  }

  /**
   * Keeps `buffer` for a later {@link take}, unless it is larger than `bytesMax`, `keptMax` are
   * kept already, or it is kept already. Give only a buffer {@link take} returned, whole, once
   * nothing reads it any more.
   */
  give(buffer: Uint8Array): void {
    const kept = this.#kept;
    if (buffer.length > this.#bytesMax || kept.length >= this.#keptMax) return;
    if (kept.includes(buffer)) return;
    kept.push(buffer);
  }
}

/** The windows every fetch read of this process takes from and gives back to. */
export const fetchReadWindows = new ReadWindows({
  keptMax: readWindowsKeptMax,
  bytesMax: readWindowKeptBytesMax,
});
