/**
 * Cluster elections with no way out before (node target only; targets.ts), through real
 * processes and a real etcd (test/helpers/cluster.ts):
 * - newuser15 #0 (b): etcd restored from an older snapshot holds partition states of older
 *   leader epochs than the replicas' logs; the controller elects again above every epoch the logs
 *   hold, writes are accepted again and every acknowledged record is readable
 *   (docs/cluster.md "Partition state older than the replicas' logs").
 */
import { afterEach, describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { ClientError } from "../../src/client/errors.ts";
import { startCluster, type TestCluster } from "../helpers/cluster.ts";
import { waitFor } from "../helpers/poll.ts";

let cluster: TestCluster | undefined;

afterEach(async () => {
  await cluster?.close();
  cluster = undefined;
});

/** `op`, tried again while it fails with a retriable error, for up to `ms`. */
async function retrying<T>(op: () => Promise<T>, ms = 30_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      return await op();
    } catch (err) {
      if (!(err instanceof ClientError) || !err.retriable || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function createTopic(c: TestCluster, name: string, config: Record<string, number>) {
  const created = await fetch(`${[...c.brokers.values()][0].httpUrl}/v1/topics`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ name, partitions: 1, config }),
  });
  expect(created.status).toBe(201);
}

/** Produces `v<from>`..`v<to - 1>` to `topic`/0 through its leader, 25 a batch, retrying. */
async function produce(c: TestCluster, topic: string, from: number, to: number) {
  for (let i = from; i < to; i += 25) {
    await retrying(async () => {
      const s = await c.state(topic);
      const b = s === undefined ? undefined : c.brokers.get(s.leader);
      if (b === undefined)
        throw new ClientError("not_leader", 0, true, `${topic}/0 has no running leader`);
      const tcp = await TcpClient.connect(b.tcp);
      try {
        await tcp.produce(
          topic,
          Array.from({ length: Math.min(25, to - i) }, (_, j) => ({ value: `v${i + j}` })),
          { partition: 0 },
        );
      } finally {
        await tcp.close();
      }
    });
  }
}

/** Every record of `topic`/0 up to the high watermark, read from its leader. */
async function readAll(c: TestCluster, topic: string): Promise<string[]> {
  const s = await c.state(topic);
  const t = await TcpClient.connect(c.brokers.get(s!.leader)!.tcp);
  const seen: string[] = [];
  try {
    let offset = 0;
    await retrying(async () => {
      for (;;) {
        const f = await t.fetch({ topic, partition: 0, offset, maxRecords: 1000 });
        if (f.records.length === 0) break;
        for (const r of f.records) seen.push(new TextDecoder().decode(r.value));
        offset = f.nextOffset;
      }
    });
  } finally {
    await t.close();
  }
  return seen;
}

const values = (n: number) => Array.from({ length: n }, (_, i) => `v${i}`);

describe("cluster: partition state older than the replicas' logs (newuser15 #0 b)", () => {
  it("after etcd goes back to an older state, the partition is elected above the logs' epochs; nothing acknowledged is lost", async () => {
    const c = await startCluster();
    cluster = c;
    await createTopic(c, "rr", { replication_factor: 3, min_insync_replicas: 2 });
    const full = (what: string) =>
      waitFor(
        what,
        async () => {
          const s = await c.state("rr");
          return s !== undefined && s.leader >= 1 && s.isr.length === 3 ? s : undefined;
        },
        30_000,
      );
    await full("rr led with its full ISR");
    await produce(c, "rr", 0, 100);
    // What the snapshot holds: this state (epoch 0, committed_offset below 100).
    const snapshot = (await c.client.get("/es-broker/partitions/rr/0"))!.value;
    const old = JSON.parse(snapshot) as { leader_epoch: number; committed_offset: number };
    // After it, the leadership moves three times (each a new epoch), with writes in each epoch.
    let acked = 100;
    for (let round = 0; round < 3; round++) {
      const s = await full("rr in sync again");
      expect(await c.stop(s.leader)).toBe(0);
      await produce(c, "rr", acked, acked + 100);
      acked += 100;
      await c.start(s.leader);
    }
    const before = await full("rr in sync before the restore");
    expect(before.leader_epoch).toBeGreaterThanOrEqual(old.leader_epoch + 3);
    // The restore: every broker stopped, the partition state put back as the snapshot held it
    // (leader epoch and committed_offset included), the brokers started again.
    for (const id of [1, 2, 3]) expect(await c.stop(id)).toBe(0);
    await c.client.put("/es-broker/partitions/rr/0", snapshot);
    for (const id of [1, 2, 3]) await c.start(id);
    const elected = await waitFor(
      "rr elected above the logs' epochs",
      async () => {
        const s = await c.state("rr");
        return s !== undefined && s.leader >= 1 && s.leader_epoch > before.leader_epoch
          ? s
          : undefined;
      },
      60_000,
    );
    expect(elected.leader_epoch).toBeGreaterThan(before.leader_epoch);
    // The controller said what it found.
    const logs = [...c.brokers.values()].map((b) => b.stderr()).join("\n");
    expect(logs).toContain('"event":"cluster.partition_state_restored"');
    expect(logs).toContain("etcd restored?");
    // Writes are accepted again, and every acknowledged record is readable.
    await produce(c, "rr", acked, acked + 50);
    acked += 50;
    await full("rr in sync after the restore");
    expect(await readAll(c, "rr")).toEqual(values(acked));
  }, 240_000);
});
