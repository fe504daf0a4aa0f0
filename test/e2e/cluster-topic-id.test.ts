/**
 * attack15b F5 through the real processes (node target only; targets.ts), docs/cluster.md
 * "Topic ids": a broker SIGKILLed while its topic is deleted and created again (within its lease,
 * so the new topic names it a replica) comes back with the deleted topic's log on disk. It must
 * move that copy aside and replicate the new topic from its start: once it leads, a consumer
 * reads exactly the acknowledged records of the new topic, none of the deleted one's.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startCluster, type TestCluster } from "../helpers/cluster.ts";
import { waitFor } from "../helpers/poll.ts";

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startCluster({ brokers: 3, name: "topic-id" });
}, 90_000);

afterAll(async () => {
  await cluster?.close();
});

async function createTopic(name: string): Promise<void> {
  const res = await fetch(`${cluster.any().httpUrl}/v1/topics`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      name,
      partitions: 3,
      config: { replication_factor: 3, min_insync_replicas: 2, replica_lag_ms: 1000 },
    }),
  });
  expect(res.status, await res.clone().text()).toBe(201);
}

/** Produces `values` to `partition` in one request through any broker; resolves once acknowledged. */
async function produce(topic: string, partition: number, values: string[]): Promise<void> {
  const res = await fetch(`${cluster.any().httpUrl}/v1/topics/${topic}/records`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ records: values.map((value) => ({ value, partition })) }),
  });
  expect(res.status, await res.clone().text()).toBe(200);
}

/** Every record value of `topic`/`partition` as broker `id` serves it (it must lead). */
async function consume(id: number, topic: string, partition: number): Promise<string[]> {
  const b = cluster.brokers.get(id)!;
  const res = await fetch(
    `${b.httpUrl}/v1/topics/${topic}/partitions/${partition}/records?offset=0&max_records=1000`,
    { redirect: "manual" },
  );
  expect(res.status, await res.clone().text()).toBe(200);
  const body = (await res.json()) as { records: { value: string }[] };
  return body.records.map((r) => r.value);
}

const range = (prefix: string, n: number) =>
  Array.from({ length: n }, (_, i) => `${prefix}${i + 1}`);

describe("a topic deleted and created again while a replica is down (attack15b F5)", () => {
  it("the returning replica moves the old copy aside and, as leader, serves only the new topic's records", async () => {
    await createTopic("t8");
    await waitFor("t8 led with full ISRs", async () => {
      const ps = await cluster.partitions("t8");
      return ps.every((p) => p.leader >= 1 && p.isr.length === 3) ? ps : undefined;
    });
    // Acknowledged with every replica in the ISR: each holds them durably, at leader epoch 0.
    for (const p of [0, 1, 2]) await produce("t8", p, range(`old-${p}-`, 20));
    const x = 3;
    const oldTopicJson = JSON.parse(
      readFileSync(join(cluster.dataDir(x), "topics", "t8", "topic.json"), "utf8"),
    ) as { topic_id?: string; topic_revision?: number };
    expect(oldTopicJson.topic_id).toMatch(/^[0-9a-f]{32}$/);
    expect(oldTopicJson.topic_revision).toBeGreaterThan(0);

    // SIGKILL x and at once, within its lease, delete and create t8 again: x is still counted
    // live, so the new topic names it a replica of every partition (replication_factor 3 would
    // be refused otherwise).
    await cluster.stop(x, "SIGKILL");
    const del = await fetch(`${cluster.any().httpUrl}/v1/topics/t8`, { method: "DELETE" });
    expect(del.status, await del.clone().text()).toBe(204);
    await createTopic("t8");
    const created = await cluster.partitions("t8");
    for (const p of created) expect(p.replicas).toContain(x);
    // A partition another broker leads at epoch 0, as x's old copy's records are: fetching at
    // its old log end with last epoch 0, x would find no divergence and append the new records
    // after the deleted topic's 20 (attack15b F5).
    const target = created.find((p) => p.leader !== x && p.leader_epoch === 0)!;
    expect(target).toBeDefined();
    const partition = target.partition;
    await waitFor(
      `x out of the ISR of the new t8/${partition}`,
      async () => {
        const p = (await cluster.partitions("t8"))[partition];
        return !p.isr.includes(x) ? p : undefined;
      },
      40_000,
    );
    const acknowledged = range("new-", 30);
    await produce("t8", partition, acknowledged);
    expect((await cluster.partitions("t8"))[partition].leader_epoch).toBe(0);

    // x returns with the deleted topic's log on disk: it must replace it, not adopt it.
    const back = await cluster.start(x);
    await waitFor(
      `x back in the ISR of the new t8/${partition}`,
      async () => {
        const p = (await cluster.partitions("t8"))[partition];
        return p.isr.includes(x) ? p : undefined;
      },
      40_000,
    );

    // Make x the leader: the other two leave (SIGTERM: their followers hold their logs first).
    const others = [...cluster.brokers.keys()].filter((id) => id !== x);
    await Promise.all(others.map((id) => cluster.stop(id, "SIGTERM")));
    await waitFor(
      `x to lead t8/${partition}`,
      async () => {
        const p = (await cluster.partitions("t8", back))[partition];
        return p.leader === x ? p : undefined;
      },
      40_000,
    );
    const served = await waitFor(`x to serve t8/${partition}`, async () => {
      const values = await consume(x, "t8", partition);
      return values.length >= acknowledged.length ? values : undefined;
    });
    expect(served).toEqual(acknowledged);
    // It knew the copy for another topic's, and its copy now records the new topic's id.
    expect(back.stderr()).toMatch(/cluster\.topic_incarnation_replaced/);
    const newTopicJson = JSON.parse(
      readFileSync(join(cluster.dataDir(x), "topics", "t8", "topic.json"), "utf8"),
    ) as { topic_id?: string; topic_revision?: number };
    expect(newTopicJson.topic_id).toMatch(/^[0-9a-f]{32}$/);
    expect(newTopicJson.topic_id).not.toBe(oldTopicJson.topic_id);
    expect(newTopicJson.topic_revision).toBeGreaterThan(oldTopicJson.topic_revision!);
  }, 240_000);
});
