/**
 * The cluster's schema registry in etcd (src/cluster/cluster-registry.ts, etcd-mirror.ts) on an
 * in-memory etcd (test/helpers/fake-etcd.ts): several brokers' registries on one etcd, under
 * interleavings the fake controls (held watches, concurrent writes, lost answers, etcd down,
 * compaction). The real process on a real etcd: test/e2e/cluster-state.test.ts.
 */
import { afterEach, describe, expect, it } from "vitest";
import { ClusterRegistryStore, RegistryJoinError } from "../../src/cluster/cluster-registry.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import { RegistryError } from "../../src/registry/errors.ts";
import type { SchemaRegistry } from "../../src/registry/registry.ts";
import { encodeState, type RegistryState } from "../../src/registry/state.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";
const opened: ClusterRegistryStore[] = [];
let tokens = 0;

afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
});

/** One broker's registry; the first on an etcd sets the global level to NONE (the schemas here are unrelated records). */
async function broker(
  etcd: FakeEtcd,
  local?: RegistryState,
): Promise<{ store: ClusterRegistryStore; registry: SchemaRegistry }> {
  const first = etcd.kvs.size === 0 && local === undefined;
  const result = await ClusterRegistryStore.open({
    etcd,
    prefix,
    clock: systemClock,
    logger: silentLogger,
    randomToken: () => `t${++tokens}`,
    local: local === undefined ? undefined : { state: local, path: "/data/schemas.json" },
  });
  opened.push(result.store);
  if (first) await result.registry.setCompatibility(undefined, "NONE");
  return result;
}

function avro(name: string, field = "f"): { schema: string } {
  return {
    schema: JSON.stringify({
      type: "record",
      name,
      fields: [{ name: field, type: "string" }],
    }),
  };
}

/** Lets the fake's watch deliver what it holds. */
const settle = () => new Promise((r) => setTimeout(r, 5));

describe("cluster registry in etcd", () => {
  it("gives concurrent registrations on two brokers distinct ids, one id per schema, and one state", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const b = await broker(etcd);
    const results = await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        (i % 2 === 0 ? a : b).registry.register(`s${i % 5}`, avro(`R${Math.floor(i / 2)}`)),
      ),
    );
    // The same schema registered through both brokers (R0 under s0 on a, and s1 on b) has one id.
    const byName = new Map<string, number>();
    results.forEach((r, i) => {
      const name = `R${Math.floor(i / 2)}`;
      const seen = byName.get(name);
      if (seen !== undefined) expect(r.id).toBe(seen);
      byName.set(name, r.id);
    });
    expect(new Set(byName.values()).size).toBe(20);
    // Other brokers' writes came first several times: the CAS failed and the change ran again.
    expect(etcd.txns).toBeGreaterThan(1 + results.length);
    await settle();
    expect(encodeState(b.registry.state)).toEqual(encodeState(a.registry.state));
    for (const [name, id] of byName)
      expect(JSON.parse(b.registry.schemaById(id).schema).name).toBe(name);
  });

  it("two concurrent writes: one transaction fails its compare, re-reads and runs the change again", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const b = await broker(etcd);
    etcd.holdWatches();
    const [x, y] = await Promise.all([
      a.registry.register("x", avro("X")),
      b.registry.register("y", avro("Y")),
    ]);
    expect(new Set([x.id, y.id])).toEqual(new Set([1, 2]));
    expect(etcd.txns).toBe(4); // the level, then x and y with one conflict
    // With the watch held, each broker still saw the other's write (the failure branch's read).
    const last = x.id === 2 ? a : b;
    expect(last.registry.state.schemas.size).toBe(2);
  });

  it("a registration acknowledged on one broker is seen by the next read on another (sync), without the watch", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const b = await broker(etcd);
    etcd.holdWatches();
    const { id } = await a.registry.register("orders-value", avro("Order"));
    expect(() => b.registry.schemaById(id)).toThrow(RegistryError);
    await b.registry.sync();
    expect(JSON.parse(b.registry.schemaById(id).schema).name).toBe("Order");
    expect(b.registry.versions("orders-value")).toEqual([1]);
  });

  it("settles a lost answer by reading back: applied once, never twice, never another id", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    etcd.indeterminateNext(1, true);
    const first = await a.registry.register("s", avro("A"));
    expect(first).toEqual({ id: 1, version: 1 });
    expect(etcd.txns).toBe(2);
    etcd.indeterminateNext(1, false);
    const second = await a.registry.register("s", avro("B"));
    expect(second).toEqual({ id: 2, version: 2 });
    const fresh = await broker(etcd);
    expect(fresh.registry.versions("s")).toEqual([1, 2]);
    expect(fresh.registry.state.nextId).toBe(3);
  });

  it("refuses writes with 503 while etcd is down, and keeps answering reads from its copy", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const { id } = await a.registry.register("s", avro("A"));
    etcd.down = true;
    const refused = await a.registry.register("s", avro("B")).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RegistryError);
    expect((refused as RegistryError).kind.http).toBe(503);
    expect((refused as RegistryError).message).toMatch(
      /etcd cannot be written, the change was not made/,
    );
    expect(JSON.parse(a.registry.schemaById(id).schema).name).toBe("A");
    etcd.down = false;
    expect((await a.registry.register("s", avro("B"))).id).toBe(2);
  });

  it("hard delete keeps the id: the same schema gets its id back, another schema never gets it", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const b = await broker(etcd);
    const { id } = await a.registry.register("s", avro("A"));
    await b.registry.deleteSubject("s");
    await a.registry.deleteSubject("s", { permanent: true });
    expect((await b.registry.register("t", avro("Other"))).id).not.toBe(id);
    expect((await b.registry.register("s", avro("A"))).id).toBe(id);
    await settle();
    expect(encodeState(a.registry.state)).toEqual(encodeState(b.registry.state));
  });

  it("lists again after a compaction and catches up", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const b = await broker(etcd);
    etcd.holdWatches();
    await a.registry.register("s", avro("A"));
    await a.registry.register("s", avro("B", "g"));
    etcd.compact();
    etcd.releaseWatches();
    await settle();
    await settle();
    expect(b.registry.versions("s")).toEqual([1, 2]);
  });

  it("imports a data directory's schemas.json into an empty cluster registry, and refuses a conflicting one", async () => {
    const source = new FakeEtcd();
    const single = await broker(source);
    await single.registry.register("s", avro("A"));
    await single.registry.register("s", avro("B", "g"));
    const local = single.registry.state;

    const etcd = new FakeEtcd();
    const first = await broker(etcd, local);
    expect(first.registry.versions("s")).toEqual([1, 2]);
    expect((await first.registry.register("t", avro("C"))).id).toBe(3);
    // The same file again (a restart), or a subset of the cluster's ids: accepted.
    await broker(etcd, local);
    // Another file giving id 1 to another schema: refused, naming the id.
    const other = await broker(new FakeEtcd());
    await other.registry.register("s", avro("Z"));
    await expect(broker(etcd, other.registry.state)).rejects.toThrow(RegistryJoinError);
    await expect(broker(etcd, other.registry.state)).rejects.toThrow(/schema id 1/);
  });
});
