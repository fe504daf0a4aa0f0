/**
 * api_keys.json under crashes (docs/security.md, "Keys"; docs/decisions.md §9): concurrent key
 * creations, revocations and a last-used update, with power lost before each of their mutations,
 * in every crash mode, with jittered completions. After every crash the file opens (never torn)
 * and agrees with what was acknowledged: an acknowledged create is there with a hash that verifies
 * its key, an acknowledged revoke is gone, and nothing else is in it.
 */
import { describe, expect, it } from "vitest";
import { KeyStore } from "../../src/auth/key-store.ts";
import { type CrashMode, MemoryFileSystem } from "../../src/fs/memory.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { seededKeyCrypto } from "../helpers/keys.ts";

const path = "/data/api_keys.json";

const crashModes: { mode: CrashMode; seed: number }[] = [
  { mode: "random", seed: 1 },
  { mode: "random", seed: 2 },
  { mode: "dropAll", seed: 0 },
  { mode: "keepAll", seed: 0 },
];

/** A disk holding keys "a" and "b", durably, and their texts. */
async function diskWithTwoKeys(): Promise<{ mem: MemoryFileSystem; texts: Map<string, string> }> {
  const mem = new MemoryFileSystem({ seed: 1 });
  await mem.mkdir("/data");
  await mem.syncDir("/");
  const keys = await open(mem, 100);
  const texts = new Map<string, string>();
  texts.set("a", (await keys.create({ name: "a", role: "admin" })).key);
  texts.set("b", (await keys.create({ name: "b", role: "producer", topics: ["t"] })).key);
  await keys.close();
  mem.crash({ mode: "dropAll", seed: 0 }); // only what is durable
  return { mem, texts };
}

function open(fs: MemoryFileSystem, seed: number): Promise<KeyStore> {
  return KeyStore.open({
    fs,
    path,
    crypto: seededKeyCrypto(seed),
    clock: new ManualClock(),
    logger: new MemoryLogger(),
  });
}

interface Outcome {
  created: Map<string, string>;
  /** Names whose create or revoke resolved. */
  ackedCreates: Set<string>;
  ackedRevokes: Set<string>;
}

/** Runs the concurrent scenario on `fs`; every call's outcome is recorded, none is awaited in order. */
async function scenario(fs: MemoryFileSystem, texts: Map<string, string>): Promise<Outcome> {
  const outcome: Outcome = { created: new Map(), ackedCreates: new Set(), ackedRevokes: new Set() };
  let keys: KeyStore;
  try {
    keys = await open(fs, 7);
  } catch {
    return outcome; // power lost before anything (opening reads only)
  }
  const settle = (p: Promise<unknown>) =>
    p.then(
      () => undefined,
      () => undefined,
    );
  const create = (name: string, role: "admin" | "consumer") =>
    settle(
      keys
        .create(role === "admin" ? { name, role } : { name, role, topics: ["t"], groups: ["g"] })
        .then((made) => {
          outcome.created.set(name, made.key);
          outcome.ackedCreates.add(name);
        }),
    );
  const revoke = (name: string) =>
    settle(keys.revoke(name).then(() => outcome.ackedRevokes.add(name)));
  const principal = keys.verify(texts.get("b")!);
  if (principal !== null) keys.noteUse(principal);
  await Promise.all([
    create("c", "admin"),
    revoke("a"),
    create("d", "consumer"),
    revoke("b"),
    create("e", "admin"),
  ]);
  await settle(keys.close());
  return outcome;
}

describe("api_keys.json under crashes", () => {
  it("concurrent creates and revokes never tear the file, and it holds exactly what was acknowledged (power lost before every mutation, every crash mode)", async () => {
    const probeDisk = await diskWithTwoKeys();
    const probe = new MemoryFileSystem({ disk: probeDisk.mem, jitter: { seed: 1, maxTurns: 3 } });
    const full = await scenario(probe, probeDisk.texts);
    expect([...full.ackedCreates].sort()).toEqual(["c", "d", "e"]);
    expect([...full.ackedRevokes].sort()).toEqual(["a", "b"]);
    const mutations = probe.bootMutationCount;
    expect(mutations).toBeGreaterThanOrEqual(5 * 5); // five file writes of five mutations each at least
    const seen = new Set<string>();
    for (let k = 1; k <= mutations + 1; k++) {
      for (const { mode, seed } of crashModes) {
        const { mem, texts } = await diskWithTwoKeys();
        const fs = new MemoryFileSystem({
          disk: mem,
          powerCutAtMutation: k,
          crashAtPowerCut: { seed, mode },
          jitter: { seed: k, maxTurns: 3 },
        });
        const outcome = await scenario(fs, texts);
        if (k > mutations) mem.crash({ seed, mode }); // everything resolved; power lost after
        const where = `power lost before mutation ${k} (${mode} ${seed})`;
        const after = await open(mem, 9); // throws if torn or unparseable
        const present = new Set(after.list().map((info) => info.name));
        for (const name of present) expect(["a", "b", "c", "d", "e"], where).toContain(name);
        for (const name of outcome.ackedCreates)
          expect(present.has(name), `${where}: created ${name}`).toBe(true);
        for (const name of outcome.ackedRevokes)
          expect(present.has(name), `${where}: revoked ${name}`).toBe(false);
        const allTexts = new Map([...texts, ...outcome.created]);
        for (const name of present) {
          const text = allTexts.get(name);
          // A key whose create was cut short is on disk but its text was never handed out.
          if (text === undefined) continue;
          expect(after.verify(text)?.name, `${where}: ${name} verifies`).toBe(name);
        }
        seen.add([...present].sort().join(","));
        await after.close();
      }
    }
    // The cuts land at many different points: the start, the end and states in between.
    expect(seen.has("a,b")).toBe(true);
    expect(seen.has("c,d,e")).toBe(true);
    expect(seen.size).toBeGreaterThan(3);
  });
});
