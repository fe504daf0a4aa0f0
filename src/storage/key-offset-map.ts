/**
 * The memory of a compaction pass (docs/storage.md "Retention and compaction" — "the first remembers only each
 * key's newest offset"): a hash table from a key's 128-bit digest (MurmurHash3 x86_128, see
 * `src/lib/murmur3.ts`) to the offset of the key's newest record and one byte of flags.
 *
 * Layout: open addressing with linear probing over one `Uint32Array` of `capacity` slots (a power
 * of two), six words a slot, so that a probe touches one cache line:
 *
 * ```
 * word 0-3   the digest
 * word 4     offset, low 32 bits
 * word 5     bits 0-21: offset's high 21 bits + 1 (0 = empty slot); bits 22-29: flags
 * ```
 *
 * That is 24 bytes a slot whatever the keys' lengths; the table doubles when it is three quarters
 * full, so a pass costs about 32–64 bytes per distinct key and nothing per record. Keys themselves
 * are never stored. Offsets are at most 2^53 − 1 (docs/decisions.md §6), so their high part fits 21 bits.
 */
import { assert } from "../lib/assert.ts";

/** 32-bit words a slot takes. */
const slotWords = 6;
/** Largest fraction of slots in use before the table doubles. */
const loadMax = 0.75;
const highMask = 0x3fffff;
const twoTo32 = 0x1_0000_0000;

/** Digest → newest offset and flags. See the module comment. */
export class KeyOffsetMap {
  #capacity: number;
  #mask: number;
  #slots: Uint32Array;
  #size = 0;
  readonly #keysMax: number;

  /**
   * @param options.keysMax most distinct keys the map accepts ({@link put} refuses more).
   * @param options.capacity initial slots (rounded up to a power of two, at least 16).
   */
  constructor(options: { keysMax: number; capacity?: number }) {
    assert(
      Number.isSafeInteger(options.keysMax) && options.keysMax >= 1,
      "keysMax is a positive integer",
    );
    this.#keysMax = options.keysMax;
    let capacity = 16;
    while (capacity < (options.capacity ?? 16)) capacity *= 2;
    this.#capacity = capacity;
    this.#mask = capacity - 1;
    this.#slots = new Uint32Array(capacity * slotWords);
  }

  /** Distinct digests stored. */
  get size(): number {
    return this.#size;
  }

  /** Bytes held by the table. */
  get memoryBytes(): number {
    return this.#slots.byteLength;
  }

  /** True when one more new key would be refused by {@link put}. */
  get full(): boolean {
    return this.#size >= this.#keysMax;
  }

  /**
   * Records `offset` (and `flags`, 0…255) as the newest for `digest`, replacing what the digest
   * had. Offsets must be put in increasing order per digest; the map keeps whatever came last.
   * @returns false, changing nothing, if the digest is new and the map already holds `keysMax` keys.
   */
  put(digest: Uint32Array, offset: number, flags: number): boolean {
    assert(Number.isSafeInteger(offset) && offset >= 0, "an offset is a safe non-negative integer");
    let w = this.#find(digest);
    if (this.#slots[w + 5] === 0) {
      if (this.#size >= this.#keysMax) return false;
      if (this.#size + 1 > this.#capacity * loadMax) {
        this.#grow();
        w = this.#find(digest);
      }
      const slots = this.#slots;
      slots[w] = digest[0];
      slots[w + 1] = digest[1];
      slots[w + 2] = digest[2];
      slots[w + 3] = digest[3];
      this.#size++;
    }
    this.#slots[w + 4] = offset % twoTo32;
    this.#slots[w + 5] = (Math.floor(offset / twoTo32) + 1) | ((flags & 0xff) << 22);
    return true;
  }

  /** The newest offset recorded for `digest`, or −1. Its flags: {@link flagsOf}. */
  offsetOf(digest: Uint32Array): number {
    const w = this.#find(digest);
    const meta = this.#slots[w + 5];
    return meta === 0 ? -1 : ((meta & highMask) - 1) * twoTo32 + this.#slots[w + 4];
  }

  /** The flags recorded with `digest`'s newest offset (0 if the digest is absent). */
  flagsOf(digest: Uint32Array): number {
    return this.#slots[this.#find(digest) + 5] >>> 22;
  }

  /**
   * Counts the keys whose newest offset is below `offsetLimit`, and how many of those have every
   * bit of `flagMask` set in their flags (one walk over the table).
   */
  countBelow(offsetLimit: number, flagMask: number): { keys: number; flagged: number } {
    const slots = this.#slots;
    let keys = 0;
    let flagged = 0;
    for (let w = 0; w < slots.length; w += slotWords) {
      const meta = slots[w + 5];
      if (meta === 0 || ((meta & highMask) - 1) * twoTo32 + slots[w + 4] >= offsetLimit) continue;
      keys++;
      if (((meta >>> 22) & flagMask) === flagMask) flagged++;
    }
    return { keys, flagged };
  }

  /** The first word of the slot holding `digest`, or of the empty slot where it would go. */
  #find(digest: Uint32Array): number {
    const slots = this.#slots;
    const mask = this.#mask;
    const d0 = digest[0];
    const d1 = digest[1];
    const d2 = digest[2];
    const d3 = digest[3];
    let slot = d0 & mask;
    for (;;) {
      const w = slot * slotWords;
      if (slots[w + 5] === 0) return w;
      if (slots[w] === d0 && slots[w + 1] === d1 && slots[w + 2] === d2 && slots[w + 3] === d3)
        return w;
      slot = (slot + 1) & mask;
    }
  }

  #grow(): void {
    const old = this.#slots;
    this.#capacity *= 2;
    this.#mask = this.#capacity - 1;
    const slots = new Uint32Array(this.#capacity * slotWords);
    const mask = this.#mask;
    for (let o = 0; o < old.length; o += slotWords) {
      if (old[o + 5] === 0) continue;
      // Every digest is distinct: the first empty slot of its probe sequence is its place.
      let slot = old[o] & mask;
      while (slots[slot * slotWords + 5] !== 0) slot = (slot + 1) & mask;
      const w = slot * slotWords;
      slots[w] = old[o];
      slots[w + 1] = old[o + 1];
      slots[w + 2] = old[o + 2];
      slots[w + 3] = old[o + 3];
      slots[w + 4] = old[o + 4];
      slots[w + 5] = old[o + 5];
    }
    this.#slots = slots;
  }
}
