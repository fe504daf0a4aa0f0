/**
 * The schema registry under power cuts (docs/registry.md "State"; field failure 33): a register,
 * a soft delete, a permanent delete and a level change, each with the power lost before every one
 * of its mutations in every crash mode. After the restart the registry is available and holds
 * either the state before the change or the state after it (after it whenever the change had
 * resolved), and no id ever names two schemas.
 */
import { describe, expect, it } from "vitest";
import { type CrashMode, MemoryFileSystem } from "../../src/fs/memory.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import { SchemaRegistry } from "../../src/registry/registry.ts";

const crashModes: { mode: CrashMode; seed: number }[] = [
  { mode: "random", seed: 1 },
  { mode: "random", seed: 2 },
  { mode: "random", seed: 3 },
  { mode: "dropAll", seed: 0 },
  { mode: "keepAll", seed: 0 },
];

const schemaA = JSON.stringify({ type: "record", name: "R", fields: [{ name: "a", type: "int" }] });
const schemaB = JSON.stringify({
  type: "record",
  name: "R",
  fields: [
    { name: "a", type: "int" },
    { name: "b", type: "string", default: "" },
  ],
});
const schemaC = JSON.stringify({ type: "enum", name: "E", symbols: ["X"] });

async function open(fs: MemoryFileSystem): Promise<SchemaRegistry> {
  return SchemaRegistry.open({ fs, dataDir: "/data", logger: silentLogger });
}

/** A disk whose registry holds subject "s" = [A] and subject "gone" = [C] (soft-deleted). */
async function baseDisk(): Promise<MemoryFileSystem> {
  const disk = new MemoryFileSystem({ seed: 9 });
  await disk.mkdir("/data");
  await disk.syncDir("/");
  const registry = await open(disk);
  await registry.register("s", { schema: schemaA });
  await registry.register("gone", { schema: schemaC });
  await registry.deleteSubject("gone");
  await registry.close();
  return disk;
}

/** Everything a client can observe, as one comparable value. */
function snapshot(registry: SchemaRegistry): unknown {
  const subjects = registry.subjects({ deleted: true });
  return {
    subjects: subjects.map((s) => ({
      subject: s,
      live: registry.subjects().includes(s) ? registry.versions(s) : [],
      versions: registry
        .versions(s, { deleted: true })
        .map((v) => registry.version(s, String(v), { deleted: true }))
        .map((v) => ({ version: v.version, id: v.id, deleted: v.deleted, schema: v.schema })),
      level: (() => {
        try {
          return registry.compatibility(s);
        } catch {
          return null;
        }
      })(),
    })),
    global: registry.compatibility(),
  };
}

const changes: { name: string; run: (r: SchemaRegistry) => Promise<unknown> }[] = [
  { name: "register a new version", run: (r) => r.register("s", { schema: schemaB }) },
  { name: "register a new subject", run: (r) => r.register("t", { schema: schemaB }) },
  { name: "soft-delete a subject", run: (r) => r.deleteSubject("s") },
  {
    name: "permanently delete a subject",
    run: (r) => r.deleteSubject("gone", { permanent: true }),
  },
  { name: "soft-delete a version", run: (r) => r.deleteVersion("s", "1") },
  { name: "set a subject's level", run: (r) => r.setCompatibility("s", "FULL") },
];

describe("schema registry changes under power cuts", () => {
  for (const change of changes) {
    it(`${change.name}: after power is lost before any of its mutations, the registry holds the old or the new state, and ids name one schema each`, async () => {
      const before = await open(await baseDisk());
      const oldState = snapshot(before);
      const probeDisk = await baseDisk();
      const probe = new MemoryFileSystem({ disk: probeDisk });
      const probed = await open(probe);
      await change.run(probed);
      const newState = snapshot(probed);
      const mutations = probe.bootMutationCount;
      expect(mutations).toBeGreaterThanOrEqual(5);
      expect(newState).not.toEqual(oldState);
      const outcomes = new Set<string>();
      for (let k = 1; k <= mutations + 1; k++) {
        for (const { mode, seed } of crashModes) {
          const disk = await baseDisk();
          const boot = new MemoryFileSystem({
            disk,
            powerCutAtMutation: k,
            crashAtPowerCut: { seed, mode },
          });
          const resolved = await open(boot).then((r) =>
            change.run(r).then(
              () => true,
              () => false,
            ),
          );
          if (resolved) disk.crash({ seed, mode });
          const after = await open(disk);
          const where = `power lost before mutation ${k} (${mode} ${seed})`;
          expect(after.unavailableReason, where).toBeNull();
          const state = snapshot(after);
          if (resolved) expect(state, where).toEqual(newState);
          else expect([oldState, newState], where).toContainEqual(state);
          outcomes.add(JSON.stringify(state) === JSON.stringify(newState) ? "new" : "old");
          // Ids: each names the schema it named before; a schema never seen gets an id none had.
          expect(after.schemaById(1).schema, where).toContain('"a"');
          const hasB = JSON.stringify(state).includes('\\"b\\"');
          const fresh = await after.register("fresh", {
            schema: JSON.stringify({ type: "fixed", name: "F", size: 3 }),
          });
          expect(fresh.id, where).toBe(hasB ? 4 : 3);
          expect((await after.register("check", { schema: schemaB })).id, where).toBe(hasB ? 3 : 4);
        }
      }
      expect([...outcomes].sort()).toEqual(["new", "old"]);
    });
  }
});
