/**
 * cluster/watch-guard.ts on the in-memory etcd (test/helpers/fake-etcd.ts) and a manual clock: a
 * watch whose stream goes deaf (attack15 F6; the fake's `deafenWatches`) is found within one check
 * period plus the grace, reopened from the revision after the last event it delivered, and the
 * missed changes reach the same handlers once, in revision order: a put, a deletion (the
 * controller key's case), and several of each. A healthy watch, changes in flight at a check,
 * keys coming and going, and a compacted watch are never called deaf. The mirror of the registry
 * and API keys (etcd-mirror.ts) rides on it.
 */
import { describe, expect, it } from "vitest";
import type { EtcdEvent } from "../../src/cluster/etcd.ts";
import { EtcdMirror } from "../../src/cluster/etcd-mirror.ts";
import { guardWatches } from "../../src/cluster/watch-guard.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { FakeEtcd, settle } from "../helpers/fake-etcd.ts";

const checkMs = 10_000;
const graceMs = 1000;

function setup() {
  const fake = new FakeEtcd();
  const clock = new ManualClock();
  const logger = new MemoryLogger();
  let deaf = 0;
  const etcd = guardWatches(fake, { clock, logger, checkMs, graceMs, onDeaf: () => deaf++ });
  /** Moves the clock in steps of `stepMs`, letting the fake's deliveries and the checks run. */
  const pass = async (ms: number, stepMs = 500) => {
    for (let t = 0; t < ms; t += stepMs) {
      clock.advance(Math.min(stepMs, ms - t));
      await settle(8);
    }
  };
  const deafLogs = () => logger.events.filter((e) => e.event === "etcd.watch_deaf");
  return { fake, clock, logger, etcd, pass, deafLogs, deafCount: () => deaf };
}

/** Every event a watch delivered, as "put key=value@rev" / "delete key@rev". */
function recorder() {
  const seen: string[] = [];
  return {
    seen,
    onEvents: (events: EtcdEvent[]) => {
      for (const e of events)
        seen.push(
          e.type === "put"
            ? `put ${e.kv.key}=${e.kv.value}@${e.kv.modRevision}`
            : `delete ${e.kv.key}@${e.kv.modRevision}`,
        );
    },
  };
}

describe("a deaf watch is found and reopened (attack15 F6)", () => {
  it("a put the prefix watch missed arrives within one period and the grace, once, and later ones too", async () => {
    const { fake, etcd, pass, deafLogs, deafCount } = setup();
    await fake.put("/p/a", "1");
    const start = (await fake.list("/p/")).revision + 1;
    const r = recorder();
    const watch = etcd.watch({ key: "/p/", prefix: true, startRevision: start }, r);
    await pass(250); // the first check counts the keys
    const rb = await fake.put("/p/b", "1");
    await pass(250);
    expect(r.seen).toEqual([`put /p/b=1@${rb}`]);

    expect(fake.deafenWatches()).toBe(1);
    const rc = await fake.put("/p/c", "1");
    await pass(250);
    expect(r.seen).toHaveLength(1); // deaf, silently
    await pass(checkMs + graceMs);
    expect(r.seen).toEqual([`put /p/b=1@${rb}`, `put /p/c=1@${rc}`]);
    expect(deafLogs()).toHaveLength(1);
    expect(deafLogs()[0].fields).toMatchObject({
      key: "/p/",
      prefix: true,
      delivered_revision: rb,
      revision: rc,
      behind_revisions: rc - rb,
      missed_puts: 1,
      missed_deletes: 0,
    });
    expect(deafCount()).toBe(1);
    expect(fake.watchCount).toBe(1); // the deaf one was cancelled

    const rd = await fake.put("/p/c", "2");
    await pass(250);
    expect(r.seen.at(-1)).toBe(`put /p/c=2@${rd}`);
    await pass(3 * checkMs);
    expect(deafLogs()).toHaveLength(1);
    await watch.cancel();
  });

  it("the controller key's deletion, missed by its watch, arrives within one period and the grace", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    const created = await fake.put("/es/controller", '{"node_id":2}');
    const r = recorder();
    etcd.watch({ key: "/es/controller", startRevision: created + 1 }, r);
    await pass(250);
    fake.deafenWatches((key) => key === "/es/controller");
    // Other keys change meanwhile: they are not this watch's.
    await fake.put("/es/other", "x");
    const gone = await fake.delete("/es/controller").then(() => fake.revision);
    await pass(checkMs + graceMs);
    expect(r.seen).toEqual([`delete /es/controller@${gone}`]);
    expect(deafLogs()[0].fields).toMatchObject({
      key: "/es/controller",
      prefix: false,
      missed_puts: 0,
      missed_deletes: 1,
    });
  });

  it("puts and deletions of the same keys, missed together, arrive in revision order, each once", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    for (const k of ["a", "b", "c"]) await fake.put(`/p/${k}`, "0");
    const r = recorder();
    etcd.watch({ key: "/p/", prefix: true, startRevision: fake.revision + 1 }, r);
    await pass(250);
    fake.deafenWatches();
    const expected: string[] = [];
    expected.push(`put /p/a=1@${await fake.put("/p/a", "1")}`);
    await fake.delete("/p/b");
    expected.push(`delete /p/b@${fake.revision}`);
    expected.push(`put /p/a=2@${await fake.put("/p/a", "2")}`);
    expected.push(`put /p/b=new@${await fake.put("/p/b", "new")}`);
    await fake.delete("/p/c");
    expected.push(`delete /p/c@${fake.revision}`);
    await pass(checkMs + graceMs);
    expect(r.seen).toEqual(expected);
    expect(deafLogs()).toHaveLength(1);
    // The count it keeps is right again: no further alarm.
    await pass(3 * checkMs);
    expect(deafLogs()).toHaveLength(1);
  });

  it("only deletions missed (fewer keys than delivered) are found too", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    for (const k of ["a", "b"]) await fake.put(`/p/${k}`, "0");
    const r = recorder();
    etcd.watch({ key: "/p/", prefix: true, startRevision: fake.revision + 1 }, r);
    await pass(250);
    fake.deafenWatches();
    await fake.delete("/p/a");
    await pass(checkMs + graceMs);
    expect(r.seen).toEqual([`delete /p/a@${fake.revision}`]);
    expect(deafLogs()[0].fields).toMatchObject({ missed_puts: 0, missed_deletes: 1 });
  });
});

describe("a healthy watch is left alone", () => {
  it("costs one read per period at rest and is never called deaf while keys come and go", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    const r = recorder();
    etcd.watch({ key: "/p/", prefix: true, startRevision: fake.revision + 1 }, r);
    await pass(250);
    for (let i = 0; i < 5; i++) {
      await fake.put(`/p/k${i}`, "1");
      await fake.put(`/p/k${i}`, "2");
      if (i % 2 === 0) await fake.delete(`/p/k${i}`);
      await pass(checkMs);
    }
    expect(deafLogs()).toEqual([]);
    const before = fake.changesReads;
    await pass(10 * checkMs);
    expect(fake.changesReads - before).toBe(10);
    expect(deafLogs()).toEqual([]);
  });

  it("changes in flight at a check (delivered within the grace) are not a deaf watch", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    const r = recorder();
    etcd.watch({ key: "/p/", prefix: true, startRevision: fake.revision + 1 }, r);
    await pass(250);
    fake.holdWatches();
    await fake.put("/p/a", "1");
    await fake.delete("/p/a");
    await fake.put("/p/b", "1");
    const readsBefore = fake.changesReads;
    await pass(checkMs); // the check finds /p/b not delivered yet
    expect(fake.changesReads - readsBefore).toBe(1);
    fake.releaseWatches();
    await pass(graceMs + 250);
    expect(r.seen).toHaveLength(3);
    expect(deafLogs()).toEqual([]);
    expect(fake.watchCount).toBe(1);
  });

  it("a slow watch held past the grace is reopened, and still delivers each event once", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    const r = recorder();
    etcd.watch({ key: "/p/", prefix: true, startRevision: fake.revision + 1 }, r);
    await pass(250);
    fake.holdWatches();
    await fake.put("/p/a", "1");
    await pass(checkMs + graceMs);
    expect(deafLogs()).toHaveLength(1);
    // Both the old (cancelled) and the new watch would deliver /p/a: it arrives once.
    fake.releaseWatches();
    await pass(250);
    expect(r.seen).toEqual([`put /p/a=1@${fake.revision}`]);
  });

  it("a first count that failed until its revision was compacted is taken now; a reopen below the compaction asks the caller to list", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    await fake.put("/p/a", "1");
    const r = recorder();
    const compacted: number[] = [];
    etcd.watch(
      { key: "/p/", prefix: true, startRevision: fake.revision + 1 },
      { onEvents: r.onEvents, onCompacted: (rev) => compacted.push(rev) },
    );
    fake.down = true; // the first count fails
    await pass(500);
    fake.down = false;
    await fake.put("/other", "x");
    await pass(500); // the watch moves past /other
    fake.compact(); // the watch's start is compacted; the watch itself is past it
    await pass(checkMs);
    expect(fake.watchCount).toBe(1);
    fake.deafenWatches();
    await fake.put("/p/b", "1");
    await pass(checkMs + graceMs);
    expect(deafLogs()).toHaveLength(1);
    expect(deafLogs()[0].fields).toMatchObject({ delivered_revision: 2, missed_puts: 1 });
    // The reopen point (revision 3) is compacted: the
    // caller lists the keys again, as after any compaction.
    expect(compacted).toEqual([3]);
    expect(r.seen).toEqual([]);
  });

  it("a first count read while events stream in is still exact (a busy prefix arms the guard)", async () => {
    const { fake, etcd, pass, deafLogs } = setup();
    await fake.put("/p/a", "1");
    // The first count's answer is held until events were delivered after its revision.
    let release: () => void = () => {};
    const gate = new Promise<void>((resolve) => (release = resolve));
    const read = fake.changedSince.bind(fake);
    let reads = 0;
    fake.changedSince = async (request) => {
      const answer = await read(request);
      if (reads++ === 0) await gate;
      return answer;
    };
    const r = recorder();
    etcd.watch({ key: "/p/", prefix: true, startRevision: fake.revision + 1 }, r);
    await pass(500); // the first count is read at the start revision, and held
    await fake.put("/p/b", "1");
    await fake.put("/p/c", "1");
    await fake.delete("/p/a");
    await pass(500);
    expect(r.seen).toHaveLength(3);
    release();
    await pass(500); // armed with 1 + 2 - 1 = 2 keys
    fake.deafenWatches();
    await fake.delete("/p/b");
    await pass(checkMs + graceMs);
    // Found by the first check after the count: it did not wait for a quiet moment to count.
    expect(r.seen.at(-1)).toBe(`delete /p/b@${fake.revision}`);
    expect(deafLogs()).toHaveLength(1);
    expect(deafLogs()[0].fields).toMatchObject({ missed_puts: 0, missed_deletes: 1 });
  });

  it("a compacted watch is handed to its caller and checked no more", async () => {
    const { fake, etcd, pass } = setup();
    const compacted: number[] = [];
    etcd.watch(
      { key: "/p/", prefix: true, startRevision: fake.revision + 1 },
      { onEvents: () => {}, onCompacted: (rev) => compacted.push(rev) },
    );
    await pass(250);
    fake.holdWatches();
    await fake.put("/p/a", "1");
    fake.compact();
    expect(compacted).toEqual([fake.revision]);
    const reads = fake.changesReads;
    await pass(3 * checkMs);
    expect(fake.changesReads).toBe(reads);
  });
});

describe("the registry and API-key mirror over a guarded etcd", () => {
  it("takes a key its deaf watch missed within one period and the grace", async () => {
    const { fake, clock, logger, etcd, pass, deafLogs } = setup();
    await fake.put("/es/registry/1", "one");
    const changes: string[][] = [];
    const mirror = await EtcdMirror.start({
      etcd,
      prefix: "/es/registry/",
      clock,
      logger,
      name: "registry",
      onChange: (keys) => changes.push([...keys]),
    });
    await pass(250);
    fake.deafenWatches();
    await fake.put("/es/registry/2", "two");
    await fake.delete("/es/registry/1");
    await pass(checkMs + graceMs);
    expect(mirror.get("/es/registry/2")?.value).toBe("two");
    expect(mirror.get("/es/registry/1")).toBeUndefined();
    expect(changes.flat().sort()).toEqual(["/es/registry/1", "/es/registry/2"]);
    expect(deafLogs()).toHaveLength(1);
    await mirror.close();
  });
});
