/**
 * A small seeded pseudo-random number generator for simulations and fault injection: the same seed
 * always yields the same sequence, on every runtime, so a failing simulation replays from its seed.
 * Not for anything secret.
 *
 * Algorithm: xoshiro128** (Blackman and Vigna), 128 bits of state, period 2^128 − 1. The state is
 * filled from the seed with splitmix32, low and high 32 bits of the seed through separate streams,
 * so every safe-integer seed gives its own sequence.
 */
import { assert } from "./assert.ts";

const two32 = 0x1_0000_0000;

/** One step of splitmix32 over `state`; returns the new state and an output word. */
function splitmix32(state: number): [next: number, out: number] {
  const next = (state + 0x9e3779b9) >>> 0;
  let z = next;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
  return [next, (z ^ (z >>> 16)) >>> 0];
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** A deterministic xoshiro128** generator. */
export class Prng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  /**
   * @param seed any safe integer (negative allowed); equal seeds give equal sequences.
   * @throws AssertionError if `seed` is not a safe integer.
   */
  constructor(seed: number) {
    assert(Number.isSafeInteger(seed), `seed must be a safe integer, got ${seed}`);
    const low = seed >>> 0;
    const high = Math.floor(seed / two32) >>> 0;
    let s = low;
    let out: number;
    [s, out] = splitmix32(s);
    this.#a = out;
    [s, out] = splitmix32(s);
    this.#b = out;
    s = (high ^ 0x6a09e667) >>> 0;
    [s, out] = splitmix32(s);
    this.#c = out;
    [s, out] = splitmix32(s);
    this.#d = out;
    // xoshiro must not start from the all-zero state (it would stay there).
    if ((this.#a | this.#b | this.#c | this.#d) === 0) this.#d = 1;
  }

  /** The next uniformly distributed unsigned 32-bit integer, in [0, 2^32). */
  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.#b, 5) >>> 0, 7), 9) >>> 0;
    const t = (this.#b << 9) >>> 0;
    this.#c = (this.#c ^ this.#a) >>> 0;
    this.#d = (this.#d ^ this.#b) >>> 0;
    this.#b = (this.#b ^ this.#c) >>> 0;
    this.#a = (this.#a ^ this.#d) >>> 0;
    this.#c = (this.#c ^ t) >>> 0;
    this.#d = rotl(this.#d, 11);
    return result;
  }

  /**
   * A uniformly distributed integer in [0, maxExclusive), without modulo bias.
   * @param maxExclusive an integer in [1, 2^32].
   * @throws AssertionError if `maxExclusive` is out of that range.
   */
  int(maxExclusive: number): number {
    assert(Number.isInteger(maxExclusive), `maxExclusive must be an integer, got ${maxExclusive}`);
    assert(maxExclusive >= 1, `maxExclusive must be at least 1, got ${maxExclusive}`);
    assert(maxExclusive <= two32, `maxExclusive must be at most 2^32, got ${maxExclusive}`);
    // Reject the top partial bucket so every residue is equally likely.
    const limit = two32 - (two32 % maxExclusive);
    for (;;) {
      const x = this.nextU32();
      if (x < limit) return x % maxExclusive;
    }
  }

  /**
   * True with probability `p`: `chance(0)` is always false, `chance(1)` always true.
   * @param p a probability in [0, 1].
   * @throws AssertionError if `p` is outside [0, 1].
   */
  chance(p: number): boolean {
    assert(p >= 0, `probability must be at least 0, got ${p}`);
    assert(p <= 1, `probability must be at most 1, got ${p}`);
    return this.nextU32() < p * two32;
  }
}
