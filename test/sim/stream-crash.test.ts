/**
 * Durable Streams under a power loss at every step. A fixed workload (start; create a stream with
 * an initial body; an idempotent producer appends four messages while a plain writer appends
 * too; the producer closes the stream with a final message; a fork is made) runs once to count
 * its mutations M; then, for every N in 1…M, the power goes just before mutation N, the machine
 * crashes (unsynced writes kept, dropped or torn by a seed), the broker starts again, and the
 * producer resends — same epoch, same `Producer-Seq`, same body — every request it has no answer
 * for. After that:
 *
 * - a stream exists only whole: its first record is the initial body (a creation cut short is
 *   removed at start, never left empty);
 * - every acknowledged append is stored, and every producer message exactly once, in order;
 * - a closed stream ends with its final message, and nothing follows it — in particular a plain
 *   append acknowledged before the close is before it, and appends after the close are refused;
 * - an acknowledged close stays closed.
 */
import { describe, expect, it } from "vitest";
import { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import type { StreamAppendRequest, StreamAppendResult } from "../../src/broker/streams/types.ts";
import { MemoryFileSystem, type CrashMode } from "../../src/fs/memory.ts";
import type { FileSystem } from "../../src/fs/types.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";

const text = (s: string) => new TextEncoder().encode(s);
const str = (b: Uint8Array) => new TextDecoder().decode(b);
const path = "chat/room-1";
const messages = ["m0", "m1", "m2", "m3"];
const producer = "writer";

interface Outcome {
  created: boolean;
  producerAcked: (StreamAppendResult | null)[];
  plainAcked: string[];
  closeAcked: StreamAppendResult | null;
  forked: boolean;
}

async function open(fs: FileSystem, logger = new MemoryLogger()): Promise<LocalBroker> {
  return LocalBroker.open({
    fs,
    dataDir: "/data",
    clock: new ManualClock(),
    logger,
    cleanupIntervalMs: 0,
  });
}

function producerAppend(seq: number): StreamAppendRequest {
  const last = seq === messages.length;
  return {
    path,
    contentType: "text/plain",
    body: text(last ? "fin" : messages[seq]),
    close: last,
    producer: { id: producer, epoch: 0, seq },
  };
}

async function attempt<T>(run: () => Promise<T>): Promise<T | null> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof BrokerError) return null;
    throw err;
  }
}

async function workload(fs: FileSystem, out: Outcome): Promise<LocalBroker | null> {
  let broker: LocalBroker;
  try {
    broker = await open(fs);
  } catch {
    return null;
  }
  const streams = broker.streams;
  out.created =
    (await attempt(() =>
      streams.create({ path, contentType: "text/plain", closed: false, body: text("init") }),
    )) !== null;
  if (!out.created) return broker;
  const plain = (async () => {
    for (const v of ["p0", "p1", "p2"]) {
      const r = await attempt(() =>
        streams.append({ path, contentType: "text/plain", body: text(v), close: false }),
      );
      if (r !== null) out.plainAcked.push(v);
    }
  })();
  for (let seq = 0; seq < messages.length; seq++) {
    out.producerAcked[seq] = await attempt(() => streams.append(producerAppend(seq)));
    if (out.producerAcked[seq] === null) break;
  }
  await plain;
  if (out.producerAcked.every((r) => r !== null))
    out.closeAcked = await attempt(() => streams.append(producerAppend(messages.length)));
  if (out.closeAcked !== null)
    out.forked =
      (await attempt(() =>
        streams.create({
          path: `${path}/fork`,
          closed: false,
          body: new Uint8Array(0),
          fork: { sourcePath: path },
        }),
      )) !== null;
  return broker;
}

async function readAll(
  broker: LocalBroker,
  at: string,
): Promise<{ values: string[]; closed: boolean }> {
  const r = await broker.streams.read({
    path: at,
    position: "start",
    waitMs: 0,
    maxBytes: 1 << 20,
  });
  return { values: r.values.map(str), closed: r.closed };
}

/** How often the sweep met the cases that matter (the test fails if it never did). */
interface Stats {
  /** A creation cut short after its topic.json was durable: removed at start. */
  interrupted: number;
  /** The final message durable but the close not: the producer's retry closed it. */
  finalWithoutClose: number;
}

async function runOne(n: number, mode: CrashMode, seed: number, stats: Stats): Promise<void> {
  const mem = new MemoryFileSystem({ seed });
  const out: Outcome = {
    created: false,
    producerAcked: [],
    plainAcked: [],
    closeAcked: null,
    forked: false,
  };
  const first = await workload(new MemoryFileSystem({ disk: mem, powerCutAtMutation: n }), out);
  await first?.close().catch(() => {});
  mem.crash({ mode, seed });
  const logger = new MemoryLogger();
  const broker = await open(mem, logger);
  try {
    stats.interrupted += logger.named("stream.creation_interrupted").length;
    const streams = broker.streams;
    const exists = streams.isStream("chat.room-1");
    if (!exists) {
      expect(out.created, "an acknowledged creation survives").toBe(false);
      return;
    }
    const before = await readAll(broker, path);
    expect(before.values[0], "a stream exists only whole").toBe("init");
    if (out.closeAcked !== null) expect(before.closed, "an acknowledged close survives").toBe(true);
    if (before.closed)
      expect(before.values.at(-1), "a closed stream ends with its final message").toBe("fin");
    else if (before.values.at(-1) === "fin") stats.finalWithoutClose++;
    // The producer resends every request it has no answer for, including the close.
    for (let seq = 0; seq <= messages.length; seq++) {
      if (seq < messages.length && out.producerAcked[seq]) continue;
      if (seq === messages.length && out.closeAcked !== null) continue;
      const r = await streams.append(producerAppend(seq));
      expect(["appended", "duplicate"]).toContain(r.outcome);
    }
    await expect(
      streams.append({ path, contentType: "text/plain", body: text("late"), close: false }),
    ).rejects.toMatchObject({ kind: { code: "stream_closed" } });
    const after = await readAll(broker, path);
    expect(after.closed).toBe(true);
    expect(after.values[0]).toBe("init");
    expect(after.values.at(-1)).toBe("fin");
    expect(after.values.filter((v) => v === "fin")).toHaveLength(1);
    const fromProducer = after.values.filter((v) => messages.includes(v));
    expect(fromProducer, "each producer message exactly once, in order").toEqual(messages);
    for (const v of out.plainAcked)
      expect(after.values, `acknowledged ${v} is stored`).toContain(v);
    for (const v of ["p0", "p1", "p2"])
      expect(after.values.filter((x) => x === v).length).toBeLessThanOrEqual(1);
    if (out.forked) {
      const fork = await readAll(broker, `${path}/fork`);
      expect(fork.values).toEqual(after.values);
      expect(fork.closed).toBe(false);
    }
  } finally {
    await broker.close();
  }
}

describe("Durable Streams under a power loss at every step", () => {
  it("keeps creations whole, producer messages exactly once and the final message last", async () => {
    const probe = new MemoryFileSystem();
    const baseline: Outcome = {
      created: false,
      producerAcked: [],
      plainAcked: [],
      closeAcked: null,
      forked: false,
    };
    const b = await workload(probe, baseline);
    await b?.close();
    expect(baseline.created && baseline.closeAcked !== null && baseline.forked).toBe(true);
    const mutations = probe.mutationCount;
    expect(mutations).toBeGreaterThan(30);
    const modes: CrashMode[] = ["random", "dropAll", "keepAll"];
    const stats: Stats = { interrupted: 0, finalWithoutClose: 0 };
    for (let n = 1; n <= mutations + 1; n++) {
      for (const [m, mode] of modes.entries()) {
        const seed = n * 10 + m;
        try {
          await runOne(n, mode, seed, stats);
        } catch (err) {
          throw new Error(
            `power lost before mutation ${n} of ${mutations}, ${mode} crash, seed ${seed}: ${err instanceof Error ? err.message : String(err)}`,
            { cause: err },
          );
        }
      }
    }
    expect(stats.interrupted, "some crash cut a creation short").toBeGreaterThan(0);
    expect(
      stats.finalWithoutClose,
      "some crash fell between the final message and the close",
    ).toBeGreaterThan(0);
  }, 120_000);
});
