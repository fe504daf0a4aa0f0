/**
 * The memory of a compaction pass (spec: Retention and compaction — "the first remembers only each
 * key's newest offset"): a hash table from a key's 128-bit digest (MurmurHash3 x86_128, see
 * `src/lib/murmur3.ts`) to the offset of the key's newest record and one byte of flags.
 *
 * Layout: open addressing with linear probing over three typed arrays of `capacity` slots
 * (a power of two): `Uint32Array` digests (4 words a slot), `Float64Array` offsets (−1 = empty slot)
 * and `Uint8Array` flags. That is 25 bytes a slot, whatever the keys' lengths; the table doubles
 * when it is three quarters full, so a pass costs about 33–67 bytes per distinct key and nothing
 * per record. Keys themselves are never stored.
 */
import { assert } from "../lib/assert.ts";

/** Bytes one slot costs: 16 of digest, 8 of offset, 1 of flags. */
const slotBytes = 16 + 8 + 1;
/** Largest fraction of slots in use before the table doubles. */
const loadMax = 0.75;

/** Digest → newest offset and flags. See the module comment. */
export class KeyOffsetMap {
  #capacity: number;
  #mask: number;
  #digests: Uint32Array;
  #offsets: Float64Array;
  #flags: Uint8Array;
  #size = 0;
  readonly #keysMax: number;

  /**
   * @param options.keysMax most distinct keys the map accepts ({@link put} refuses more).
   * @param options.capacity initial slots (rounded up to a power of two, at least 16).
   */
  constructor(options: { keysMax: number; capacity?: number }) {
    assert(Number.isSafeInteger(options.keysMax) && options.keysMax >= 1, "keysMax is a positive integer");
    this.#keysMax = options.keysMax;
    let capacity = 16;
    while (capacity < (options.capacity ?? 16)) capacity *= 2;
    this.#capacity = capacity;
    this.#mask = capacity - 1;
    this.#digests = new Uint32Array(capacity * 4);
    this.#offsets = new Float64Array(capacity).fill(-1);
    this.#flags = new Uint8Array(capacity);
  }

  /** Distinct digests stored. */
  get size(): number {
    return this.#size;
  }

  /** Bytes held by the table's arrays. */
  get memoryBytes(): number {
    return this.#capacity * slotBytes;
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
    let slot = this.#find(digest);
    if (this.#offsets[slot] < 0) {
      if (this.#size >= this.#keysMax) return false;
      if (this.#size + 1 > this.#capacity * loadMax) {
        this.#grow();
        slot = this.#find(digest);
      }
      const d = slot * 4;
      this.#digests[d] = digest[0];
      this.#digests[d + 1] = digest[1];
      this.#digests[d + 2] = digest[2];
      this.#digests[d + 3] = digest[3];
      this.#size++;
    }
    this.#offsets[slot] = offset;
    this.#flags[slot] = flags;
    return true;
  }

  /** The newest offset recorded for `digest`, or −1. Its flags: {@link flagsOf}. */
  offsetOf(digest: Uint32Array): number {
    return this.#offsets[this.#find(digest)];
  }

  /** The flags recorded with `digest`'s newest offset (0 if the digest is absent). */
  flagsOf(digest: Uint32Array): number {
    const slot = this.#find(digest);
    return this.#offsets[slot] < 0 ? 0 : this.#flags[slot];
  }

  /**
   * Counts the keys whose newest offset is below `offsetLimit`, and how many of those have every
   * bit of `flagMask` set in their flags (one walk over the table).
   */
  countBelow(offsetLimit: number, flagMask: number): { keys: number; flagged: number } {
    let keys = 0;
    let flagged = 0;
    for (let slot = 0; slot < this.#capacity; slot++) {
      const offset = this.#offsets[slot];
      if (offset < 0 || offset >= offsetLimit) continue;
      keys++;
      if ((this.#flags[slot] & flagMask) === flagMask) flagged++;
    }
    return { keys, flagged };
  }

  /** The slot holding `digest`, or the empty slot where it would go. */
  #find(digest: Uint32Array): number {
    const digests = this.#digests;
    const offsets = this.#offsets;
    const mask = this.#mask;
    const d0 = digest[0];
    const d1 = digest[1];
    const d2 = digest[2];
    const d3 = digest[3];
    let slot = d0 & mask;
    for (;;) {
      if (offsets[slot] < 0) return slot;
      const d = slot * 4;
      if (digests[d] === d0 && digests[d + 1] === d1 && digests[d + 2] === d2 && digests[d + 3] === d3) return slot;
      slot = (slot + 1) & mask;
    }
  }

  #grow(): void {
    const oldDigests = this.#digests;
    const oldOffsets = this.#offsets;
    const oldFlags = this.#flags;
    const oldCapacity = this.#capacity;
    this.#capacity = oldCapacity * 2;
    this.#mask = this.#capacity - 1;
    this.#digests = new Uint32Array(this.#capacity * 4);
    this.#offsets = new Float64Array(this.#capacity).fill(-1);
    this.#flags = new Uint8Array(this.#capacity);
    const digest = new Uint32Array(4);
    for (let old = 0; old < oldCapacity; old++) {
      if (oldOffsets[old] < 0) continue;
      digest.set(oldDigests.subarray(old * 4, old * 4 + 4));
      const slot = this.#find(digest);
      this.#digests.set(digest, slot * 4);
      this.#offsets[slot] = oldOffsets[old];
      this.#flags[slot] = oldFlags[old];
    }
  }
}
