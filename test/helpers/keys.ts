/** API-key helpers for tests: a seeded {@link KeyCrypto} and a key store on a simulated disk. */
import type { KeyCrypto } from "../../src/auth/crypto.ts";
import { KeyStore } from "../../src/auth/key-store.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { type Clock, ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { systemKeyCrypto } from "../../src/runtime/crypto.ts";

/** Key randomness from a seeded generator (replayable), SHA-256 from the runtime. Never for real keys. */
export function seededKeyCrypto(seed: number): KeyCrypto {
  const prng = new Prng(seed);
  return {
    randomBytes(count) {
      const bytes = new Uint8Array(count);
      for (let i = 0; i < count; i++) bytes[i] = prng.int(256);
      return bytes;
    },
    sha256: (bytes) => systemKeyCrypto.sha256(bytes),
  };
}

/** A key store at `/data/api_keys.json` on `fs` (default: a new simulated disk). */
export async function openTestKeyStore(
  options: { fs?: FileSystem; clock?: Clock; logger?: MemoryLogger; seed?: number } = {},
): Promise<{ keys: KeyStore; fs: FileSystem; clock: Clock; logger: MemoryLogger; path: string }> {
  const fs = options.fs ?? new MemoryFileSystem();
  const clock = options.clock ?? new ManualClock();
  const logger = options.logger ?? new MemoryLogger();
  const path = "/data/api_keys.json";
  if ((await fs.stat("/data")) === null) await fs.mkdir("/data");
  const keys = await KeyStore.open({
    fs,
    path,
    crypto: seededKeyCrypto(options.seed ?? 1),
    clock,
    logger,
  });
  return { keys, fs, clock, logger, path };
}
