/**
 * A deaf watch stream on a real three-member etcd (docs/cluster.md "A watch that goes deaf";
 * attack15 F6): a TCP proxy in front of the first member (test/helpers/tcp-proxy.ts) drops
 * everything etcd sends on the watch connections and keeps them open, while the member, reached
 * through the same proxy, answers every status probe. An unguarded watch stays deaf, with no
 * `etcd.watch_broken`; the same client behind the guard (cluster/watch-guard.ts) logs
 * `etcd.watch_deaf`, reopens on the next member, and delivers the change it missed and the later
 * ones, each once, in order. A healthy watch checked every 200 ms while hundreds of puts and deletions
 * stream through it (most checks meet changes in flight) is never called deaf.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { guardWatches } from "../../src/cluster/watch-guard.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { EtcdHttpClient } from "../../src/runtime/etcd.ts";
import { type EtcdCluster, freePorts, startEtcdCluster } from "../helpers/etcd.ts";
import { TcpProxy } from "../helpers/tcp-proxy.ts";

let etcd: EtcdCluster;
let proxy: TcpProxy;

beforeAll(async () => {
  etcd = await startEtcdCluster({ size: 3 });
  const first = new URL(etcd.endpoints[0]);
  const [port] = await freePorts(1);
  proxy = await TcpProxy.start({ host: first.hostname, port: Number(first.port) }, port);
}, 60_000);

afterAll(async () => {
  await proxy?.close();
  await etcd?.stop();
});

async function until(what: string, cond: () => boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("a busy healthy watch", () => {
  it("is never called deaf while writes, updates and deletions stream through it", async () => {
    const logger = new MemoryLogger();
    const client = new EtcdHttpClient(etcd.endpoints, { requestTimeoutMs: 2000, logger });
    // Checks every 200 ms: most of them meet changes in flight. Their reads are counted.
    let reads = 0;
    const counting = new Proxy(client, {
      get: (target, name) => {
        if (name === "changedSince")
          return (r: Parameters<EtcdHttpClient["changedSince"]>[0]) => {
            reads++;
            return target.changedSince(r);
          };
        const v = Reflect.get(target, name);
        return typeof v === "function" ? v.bind(target) : v;
      },
    });
    const guarded = guardWatches(counting, {
      clock: systemClock,
      logger,
      checkMs: 200,
      graceMs: 500,
    });
    const prefix = `/watch-busy/${process.pid}/`;
    try {
      const start = (await client.list(prefix)).revision + 1;
      let events = 0;
      const watch = guarded.watch(
        { key: prefix, prefix: true, startRevision: start },
        { onEvents: (e) => (events += e.length) },
      );
      let writes = 0;
      const until = Date.now() + 4000;
      await Promise.all(
        Array.from({ length: 8 }, async (_, w) => {
          for (let i = 0; Date.now() < until; i++) {
            const key = `${prefix}${w}/${i % 5}`;
            if (i % 7 === 6) await client.delete(key);
            else await client.put(key, String(i));
            writes++;
          }
        }),
      );
      await new Promise((r) => setTimeout(r, 1000));
      expect(writes).toBeGreaterThan(200);
      // Checks ran: one read each, a second after the grace when changes were in flight (a
      // check every ~750 ms then: 200 ms, the reads, the 500 ms grace).
      expect(reads).toBeGreaterThan(5);
      expect(events).toBeGreaterThan(200);
      expect(logger.named("etcd.watch_deaf")).toEqual([]);
      expect(logger.named("etcd.watch_broken")).toEqual([]);
      await watch.cancel();
    } finally {
      await client.close();
    }
  });
});

describe("a watch stream its member no longer feeds", () => {
  it("is found by the guard within a period and the grace, and resumes on the next member", async () => {
    const logger = new MemoryLogger();
    const endpoints = [`http://127.0.0.1:${proxy.port}`, ...etcd.endpoints.slice(1)];
    // Status probes every 500 ms: they keep passing, the stream's member is alive.
    const client = new EtcdHttpClient(endpoints, {
      requestTimeoutMs: 2000,
      watchCheckMs: 500,
      logger,
    });
    const checkMs = 1000;
    const graceMs = 300;
    const guarded = guardWatches(client, { clock: systemClock, logger, checkMs, graceMs });
    const writer = new EtcdHttpClient(etcd.endpoints.slice(1), { requestTimeoutMs: 2000 });
    const prefix = `/watch-deaf/${process.pid}/`;
    try {
      const start = (await writer.list(prefix)).revision + 1;
      const seen: string[] = [];
      const raw: string[] = [];
      const watch = guarded.watch(
        { key: `${prefix}g/`, prefix: true, startRevision: start },
        { onEvents: (events) => seen.push(...events.map((e) => e.kv.value)) },
      );
      const unguarded = client.watch(
        { key: `${prefix}r/`, prefix: true, startRevision: start },
        { onEvents: (events) => raw.push(...events.map((e) => e.kv.value)) },
      );
      await writer.put(`${prefix}g/k`, "1");
      await writer.put(`${prefix}r/k`, "1");
      await until("both watches' first event", () => seen.length === 1 && raw.length === 1, 10_000);

      expect(proxy.muteWatches()).toBe(2);
      const mutedAt = Date.now();
      await writer.put(`${prefix}g/k`, "2");
      await writer.put(`${prefix}r/k`, "2");
      await until("the guarded watch's missed event", () => seen.length === 2, 10_000);
      const healedMs = Date.now() - mutedAt;
      await writer.put(`${prefix}g/k`, "3");
      await until("a later event", () => seen.length === 3, 10_000);
      expect(seen).toEqual(["1", "2", "3"]);
      // Found by the second check after the mute at the latest, plus the grace and the reopen.
      expect(healedMs).toBeLessThan(2 * checkMs + graceMs + 5000);
      expect(logger.named("etcd.watch_deaf")).toHaveLength(1);
      expect(logger.named("etcd.watch_deaf")[0]).toMatchObject({
        key: `${prefix}g/`,
        prefix: true,
        missed_puts: 1,
        missed_deletes: 0,
      });
      const broken = logger.named("etcd.watch_broken");
      expect(broken).toHaveLength(1);
      expect(broken[0]).toMatchObject({ key: `${prefix}g/`, endpoint: endpoints[0] });
      expect(String(broken[0].error)).toMatch(/missed changes up to revision/);
      expect(logger.named("etcd.watch_resumed")[0]).toMatchObject({ endpoint: endpoints[1] });

      // The unguarded watch on the same muted member heard nothing and saw no break: the
      // member answered every status probe meanwhile.
      await new Promise((r) => setTimeout(r, 500));
      expect(raw).toEqual(["1"]);
      expect(logger.named("etcd.watch_broken").filter((e) => e.key === `${prefix}r/`)).toEqual([]);
      await watch.cancel();
      await unguarded.cancel();
    } finally {
      await client.close();
      await writer.close();
    }
  });
});
