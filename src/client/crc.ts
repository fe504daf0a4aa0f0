/**
 * Installs the fastest CRC-32 this runtime has into `src/lib/crc32.ts`. It lives with the client
 * because the client checks every fetched record's CRC in the user's process, where the runtime
 * layer is not: `TcpClient.connect` installs it, and so does the broker at start
 * (`runtime/crc.ts` re-exports it). The choice follows
 * `bench/crc32.mjs` (numbers in docs/runtimes.md; same IEEE values everywhere, checked by
 * `setCrc32Implementation` on a fixed vector before it is used):
 *
 * | runtime | 256 B: zlib vs crc-32 | 64 KiB: zlib vs crc-32 | chosen                                   |
 * |---------|-----------------------|------------------------|------------------------------------------|
 * | Node 20 | 1.05–1.4× slower      | ≈ 3× faster            | crc-32 below 512 bytes, zlib.crc32 above |
 * | Deno 2  | ≈ 3.5× faster         | ≈ 26× faster           | zlib.crc32                               |
 * | Bun 1   | ≈ 2.2× faster         | ≈ 20× faster           | zlib.crc32                               |
 *
 * Node's `zlib.crc32` pays ~100 ns per call to cross into C++, which the pure-JS table lookup beats
 * for small buffers (crc-32 is ≈ 3× faster at 64 B, zlib ≈ 2× faster at 1 KiB: the crossover is
 * near 512 bytes). On Bun crc-32 wins only below ~100 bytes, by ~10 ns, not worth a branch. Where
 * `zlib.crc32` is missing (Node before 20.15) the portable `crc-32` stays.
 */
import * as zlib from "node:zlib";
import { crc32Portable, setCrc32Implementation, type Crc32Function } from "../lib/crc32.ts";

/** Below this many bytes Node computes CRC-32 with `crc-32` rather than `zlib.crc32` (measured crossover). */
export const nodeNativeCrc32BytesMin = 512;

/** Which implementation {@link installFastCrc32} chose, for logs and the benchmark table. */
export type Crc32Choice = "zlib.crc32" | "crc-32" | "crc-32 below 512 B, zlib.crc32 above";

/**
 * Picks and installs the CRC-32 implementation for this runtime (table above).
 * @returns the choice made. Never throws: if the native one gives a wrong value, the portable one stays.
 */
export function installFastCrc32(): Crc32Choice {
  const native = (zlib as { crc32?: (data: Uint8Array, value?: number) => number }).crc32;
  if (typeof native !== "function") return "crc-32";
  const nativeCrc32: Crc32Function = (bytes) => native(bytes);
  // setCrc32Implementation checks a 9-byte vector; check the native path on a buffer that takes it too.
  const probe = new Uint8Array(nodeNativeCrc32BytesMin + 3).map((_, i) => (i * 7 + 1) & 0xff);
  if (nativeCrc32(probe) >>> 0 !== crc32Portable(probe)) return "crc-32";
  try {
    const g = globalThis as { Deno?: unknown; Bun?: unknown };
    if (g.Deno === undefined && g.Bun === undefined) {
      setCrc32Implementation((bytes) =>
        bytes.length < nodeNativeCrc32BytesMin ? crc32Portable(bytes) : nativeCrc32(bytes),
      );
      return "crc-32 below 512 B, zlib.crc32 above";
    }
    setCrc32Implementation(nativeCrc32);
    return "zlib.crc32";
  } catch {
    return "crc-32";
  }
}
