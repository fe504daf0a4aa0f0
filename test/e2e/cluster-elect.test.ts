/**
 * Cluster elections with no way out before (node target only; targets.ts), through real
 * processes and a real etcd (test/helpers/cluster.ts):
 * - newuser15 #0 (b): etcd restored from an older snapshot holds partition states of older
 *   leader epochs than the replicas' logs; the controller elects again above every epoch the logs
 *   hold, writes are accepted again and every acknowledged record is readable
 *   (docs/cluster.md "Partition state older than the replicas' logs").
 * - attack15 F2: a start on an empty directory (the disk not mounted) forgets the node's place;
 *   the real directory started again gets it back and leads its RF 1 partition again, every
 *   record readable; and an ELR waiting for a broker that never returns is shown by
 *   `cluster status` and ended by `es-broker cluster elect --unclean` (docs/cluster.md "Unclean
 *   leader election").
 * The scenarios share one etcd and cluster, each on topics of its own, and each leaves brokers 1-3
 * running on their own directories (a broker it stopped is started again before the next one);
 * a scenario that fails leaves the next a new cluster.
 */
import { join } from "node:path";
import { afterAll, describe, expect, it, onTestFailed } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { ClientError } from "../../src/client/errors.ts";
import { type StoredPartitionState, startCluster, type TestCluster } from "../helpers/cluster.ts";
import { waitFor } from "../helpers/poll.ts";
import { runCli } from "./harness.ts";

let cluster: TestCluster | undefined;

afterAll(async () => {
  await cluster?.close();
  cluster = undefined;
});

/**
 * The cluster of this file, with brokers 1-3 running: started on first use, again after a
 * scenario failed (what it left is unknown), else the one before with any broker a scenario
 * left stopped started again on its own directory. Call it at the start of a scenario.
 */
async function sharedCluster(): Promise<TestCluster> {
  onTestFailed(async () => {
    const failed = cluster;
    cluster = undefined;
    await failed?.close();
  });
  if (cluster === undefined) cluster = await startCluster();
  for (const id of [1, 2, 3]) if (!cluster.brokers.has(id)) await cluster.start(id);
  return cluster;
}

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

/** Produces `v<from>`..`v<to - 1>` to `topic`/`partition` through its leader, 25 a batch, retrying. */
async function produce(c: TestCluster, topic: string, from: number, to: number, partition = 0) {
  for (let i = from; i < to; i += 25) {
    await retrying(async () => {
      const s = await c.state(topic, partition);
      const b = s === undefined ? undefined : c.brokers.get(s.leader);
      if (b === undefined)
        throw new ClientError("not_leader", 0, true, `${topic}/${partition} has no running leader`);
      const tcp = await TcpClient.connect(b.tcp);
      try {
        await tcp.produce(
          topic,
          Array.from({ length: Math.min(25, to - i) }, (_, j) => ({ value: `v${i + j}` })),
          { partition },
        );
      } finally {
        await tcp.close();
      }
    });
  }
}

/** Every record of `topic`/`partition` up to the high watermark, read from its leader. */
async function readAll(c: TestCluster, topic: string, partition = 0): Promise<string[]> {
  const s = await c.state(topic, partition);
  const t = await TcpClient.connect(c.brokers.get(s!.leader)!.tcp);
  const seen: string[] = [];
  try {
    let offset = 0;
    await retrying(async () => {
      for (;;) {
        const f = await t.fetch({ topic, partition, offset, maxRecords: 1000 });
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

/** `cluster status` of `topic`/0 through any broker: its `--json` partition and the table. */
async function statusOf(
  c: TestCluster,
  topic: string,
): Promise<{
  json: {
    leader_epoch: number;
    reason: string | null;
    forgotten: Record<string, unknown>[] | null;
  };
  text: string;
}> {
  const broker = `127.0.0.1:${[...c.brokers.values()][0].tcp.port}`;
  const json = await runCli(["cluster", "status", "--broker", broker, "--json", "--topic", topic]);
  expect(json.code, json.stderr).toBe(0);
  const text = await runCli(["cluster", "status", "--broker", broker, "--topic", topic]);
  expect(text.code, text.stderr).toBe(0);
  const doc = JSON.parse(json.stdout.toString()) as {
    topics: { partitions: { leader_epoch: number; reason: string | null; forgotten: [] }[] }[];
  };
  return { json: doc.topics[0].partitions[0], text: text.stdout.toString() };
}

describe("cluster: partition state older than the replicas' logs (newuser15 #0 b)", () => {
  it("after etcd goes back to an older state, the partition is elected above the logs' epochs; nothing acknowledged is lost", async () => {
    const c = await sharedCluster();
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

/** Resolves once node `id`'s registration is gone from etcd (its lease revoked or expired). */
const unregistered = (c: TestCluster, id: number) =>
  waitFor(
    `node ${id}'s registration gone`,
    async () => ((await c.client.get(`/es-broker/brokers/${id}`)) === null ? true : undefined),
    30_000,
  );

/**
 * Ends killed node `id`'s membership as the expiry of its lease does, without waiting out the 6 s
 * TTL: the lease is revoked through etcd's API, which deletes the registration and every other
 * key on it in one revision, as expiry does. Resolves once the registration is gone.
 */
async function expireLease(c: TestCluster, id: number): Promise<void> {
  const kv = await c.client.get(`/es-broker/brokers/${id}`);
  if (kv !== null) await c.client.leaseRevoke(kv.lease);
  await unregistered(c, id);
}

/**
 * Creates `topic` (one partition, replication factor 1), produces `v0`..`v<records - 1>` to it,
 * then kills its replica X and, once X's registration is gone, starts X on an empty directory
 * (`<root>/fresh-<topic>`: its disk not mounted), which forgets X's place in `topic`/0.
 * Resolves with X.
 */
async function forgetOnEmptyDirectory(
  c: TestCluster,
  topic: string,
  records: number,
): Promise<number> {
  await createTopic(c, topic, { replication_factor: 1, min_insync_replicas: 1 });
  const s0 = await waitFor(`${topic} led`, async () => {
    const s = await c.state(topic);
    return s !== undefined && s.leader >= 1 ? s : undefined;
  });
  const X = s0.replicas[0];
  await produce(c, topic, 0, records);
  await c.stop(X, "SIGKILL");
  await expireLease(c, X);
  const fresh = await c.start(X, join(c.root, `fresh-${topic}`));
  await waitFor(`the empty directory forgot X's place in ${topic}/0`, async () =>
    fresh
      .stderr()
      .split("\n")
      .some(
        (l) => l.includes('"event":"cluster.replica_data_forgotten"') && l.includes(`"${topic}/0"`),
      )
      ? true
      : undefined,
  );
  return X;
}

/** Stops node `id` cleanly and, once its registration is gone, starts it on its own directory. */
async function restartOnOwnDirectory(c: TestCluster, id: number): Promise<void> {
  expect(await c.stop(id)).toBe(0);
  await unregistered(c, id);
  await c.start(id);
}

describe("cluster: a start on an empty directory, then the real one (attack15 F2)", () => {
  it("the real directory is eligible again and leads its RF 1 partition with every record", async () => {
    const c = await sharedCluster();
    // X is killed; once its registration is gone, an empty directory starts as X.
    const X = await forgetOnEmptyDirectory(c, "solo", 200);
    const forgotten = (await c.state("solo"))!;
    expect(forgotten.leader).toBe(-1);
    expect(forgotten.elr).toEqual([]);
    // The operator notices: stops it, starts X on its real directory.
    await restartOnOwnDirectory(c, X);
    const back = await waitFor(
      "solo led by the real directory again",
      async () => {
        const s = await c.state("solo");
        return s !== undefined && s.leader === X ? s : undefined;
      },
      30_000,
    );
    expect(back.isr).toEqual([X]);
    await produce(c, "solo", 200, 250);
    expect(await readAll(c, "solo")).toEqual(values(250));
  }, 180_000);
});

/** `es-broker cluster elect --unclean <extra> --topic <topic> --partition 0` against `c`'s etcd. */
const electUnclean = (c: TestCluster, topic: string, ...extra: string[]) =>
  runCli([
    ...["cluster", "elect", "--unclean", ...extra],
    ...["--topic", topic, "--partition", "0", "--cluster", c.etcd.clusterUrl],
  ]);

describe("cluster: unclean leader election (attack15 F2 b, attack15b F3)", () => {
  it("an ELR waiting for a broker that never returns: cluster status says so; cluster elect --unclean ends it", async () => {
    const c = await sharedCluster();
    await createTopic(c, "t3", { replication_factor: 3, min_insync_replicas: 2 });
    await waitFor("t3 in sync", async () =>
      (await c.state("t3"))?.isr.length === 3 ? true : undefined,
    );
    await produce(c, "t3", 0, 150);
    for (const id of [1, 2, 3]) await c.stop(id, "SIGKILL");
    for (const id of [1, 2, 3]) await expireLease(c, id);
    // Node 3 never comes back (its machine is gone).
    await c.start(1);
    await c.start(2);
    const stuck = await waitFor(
      "t3 offline with every replica in the ELR",
      async () => {
        const s = await c.state("t3");
        return s !== undefined && s.leader === -1 && s.elr.length === 3 ? s : undefined;
      },
      30_000,
    );
    expect(stuck.isr).toEqual([]);
    const broker = (id: number) => `127.0.0.1:${c.brokers.get(id)!.tcp.port}`;
    const status = await runCli(["cluster", "status", "--broker", broker(1), "--json"]);
    expect(status.code, status.stderr).toBe(0);
    const doc = JSON.parse(status.stdout.toString()) as {
      topics: { name: string; partitions: { status: string; reason: string | null }[] }[];
    };
    const p = doc.topics.find((t) => t.name === "t3")!.partitions[0];
    expect(p.status).toBe("offline");
    expect(p.reason).toMatch(/^waiting for node 3 of the ELR/);
    expect(p.reason).toContain("es-broker cluster elect --unclean --topic t3 --partition 0");
    const text = await runCli(["cluster", "status", "--broker", broker(1)]);
    expect(text.stdout.toString()).toMatch(/^t3\s+0\s.*offline \(waiting for node 3 of the ELR/m);
    // The election itself: without --unclean it is refused; with it, node 1 or 2 leads.
    const refused = await runCli([
      "cluster",
      "elect",
      "--topic",
      "t3",
      "--cluster",
      c.etcd.clusterUrl,
    ]);
    expect(refused.code).toBe(2);
    expect(refused.stderr).toContain("cluster elect needs --unclean");
    const elect = await electUnclean(c, "t3");
    expect(elect.code, elect.stderr).toBe(0);
    expect(elect.stdout.toString()).toMatch(
      /^t3\/0: node [12] leads at epoch \d+ \(unclean: 0 records below committed_offset lost, and any acknowledged record only node 3 held\)\n$/,
    );
    const led = (await c.state("t3"))!;
    expect([1, 2]).toContain(led.leader);
    const logs = [...c.brokers.values()].map((b) => b.stderr()).join("\n");
    expect(logs).toContain('"event":"cluster.unclean_leader_elected"');
    // Every acknowledged record was on nodes 1 and 2 too: nothing is lost, and writes go on.
    await produce(c, "t3", 150, 200);
    expect(await readAll(c, "t3")).toEqual(values(200));
    // Node 3 is a follower now and not live: it reads as such, not as a lag (newuser16 #7).
    const after = await runCli(["cluster", "status", "--broker", broker(1), "--json"]);
    expect(after.code, after.stderr).toBe(0);
    const followers = (
      JSON.parse(after.stdout.toString()) as {
        topics: {
          name: string;
          partitions: { followers: { node_id: number; live: boolean }[] | null }[];
        }[];
      }
    ).topics.find((t) => t.name === "t3")!.partitions[0].followers;
    expect(followers?.map((f) => [f.node_id, f.live]).sort()).toEqual([
      [3 - led.leader, true],
      [3, false],
    ]);
    const afterText = await runCli(["cluster", "status", "--broker", broker(1)]);
    expect(afterText.stdout.toString()).toMatch(
      new RegExp(
        `t3\\s+0\\s+${led.leader}\\s.*\\s(${3 - led.leader}:\\d+,3:not-live|3:not-live,${3 - led.leader}:\\d+)\\s`,
      ),
    );
    // Asked again, it is refused: the partition has a leader.
    const again = await electUnclean(c, "t3");
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("t3/0 not elected: it is not offline");
    // A topic or partition that does not exist is said to be so, exit 1 (attack16 F8: a
    // misspelt topic read "has no offline partition", as if there were nothing to do).
    const electIn = (...where: string[]) =>
      runCli(["cluster", "elect", "--unclean", ...where, "--cluster", c.etcd.clusterUrl]);
    for (const where of [
      ["--topic", "nosuch"],
      ["--topic", "nosuch", "--partition", "0"],
    ]) {
      const r = await electIn(...where);
      expect({ where, code: r.code, stderr: r.stderr }).toEqual({
        where,
        code: 1,
        stderr: `es-broker cluster elect: no such topic "nosuch" in the cluster (etcd has no /es-broker/topics/nosuch)\n`,
      });
    }
    const noPartition = await electIn("--topic", "t3", "--partition", "9");
    expect(noPartition.code).toBe(1);
    expect(noPartition.stderr).toBe(
      "es-broker cluster elect: t3/9 not elected: no such partition\n",
    );
  }, 180_000);
});

describe("cluster: the unclean election over a forgotten directory (attack16 F4)", () => {
  it("refused until the loss is accepted, said as every record of that directory; the real directory back is not elected over what was acknowledged since", async () => {
    const c = await sharedCluster();
    // X's disk is not mounted at its next start: an empty directory starts as X.
    const X = await forgetOnEmptyDirectory(c, "f4", 100);
    const elect = (...extra: string[]) => electUnclean(c, "f4", ...extra);
    // Asked until X has published its log end (its first publication after start has none).
    const refused = await waitFor(
      "a refusal naming the forgotten directory",
      async () => {
        const r = await elect();
        return r.stderr.includes("forgotten data directory") ? r : undefined;
      },
      30_000,
    );
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`Start node ${X} on data directory `);
    expect(refused.stderr).toContain("--accept-data-loss");
    expect((await c.state("f4"))!.leader).toBe(-1);
    // cluster status says why, as the controller does (before: the generic "no eligible
    // replica (unclean election needed, losing what the others held ...)").
    const forgottenDir = /Start node \d+ on data directory ([^\s:,;)]+)/.exec(refused.stderr)?.[1];
    expect(forgottenDir).toBeDefined();
    const status = await statusOf(c, "f4");
    expect(status.json.forgotten).toEqual([
      { node_id: X, data_dir_id: forgottenDir, leader_epoch: status.json.leader_epoch },
    ]);
    expect(status.json.reason).toBe(
      `node ${X} runs on another data directory than the one that held this partition (forgotten directory ${forgottenDir}): start it on that data directory; an unclean election now loses every record that directory held (es-broker cluster elect --unclean --topic f4 --partition 0 --accept-data-loss)`,
    );
    expect(status.text).toContain(`offline (${status.json.reason})`);
    const accepted = await elect("--accept-data-loss");
    expect(accepted.code, accepted.stderr).toBe(0);
    expect(accepted.stdout.toString()).toContain(
      `, and every record node ${X}'s forgotten data directory `,
    );
    // Records acknowledged on the empty directory, at offsets the real one holds others at.
    await produce(c, "f4", 1000, 1030);
    const since = (await c.state("f4"))!;
    await restartOnOwnDirectory(c, X);
    const offlineAt = await waitFor(
      "f4 offline with the real directory in the ELR",
      async () => {
        const kv = await c.client.get("/es-broker/partitions/f4/0");
        const s = kv === null ? undefined : (JSON.parse(kv.value) as StoredPartitionState);
        return s !== undefined && s.leader === -1 && s.elr.includes(X)
          ? kv!.modRevision
          : undefined;
      },
      30_000,
    );
    // It publishes its log end of f4/0 after that state (which names it): the ELR rule's chance.
    await waitFor(
      `node ${X}'s log end of f4/0 published`,
      async () => {
        const reg = await c.client.get(`/es-broker/brokers/${X}`);
        const kv = await c.client.get(`/es-broker/log_ends/${X}`);
        if (reg === null || kv === null || kv.modRevision <= offlineAt) return undefined;
        const ends = JSON.parse(kv.value) as { incarnation: string; log_end_offsets: object };
        const { incarnation } = JSON.parse(reg.value) as { incarnation: string };
        return ends.incarnation === incarnation && "f4/0" in ends.log_end_offsets
          ? true
          : undefined;
      },
      30_000,
    );
    const still = (await c.state("f4"))!;
    expect(still.leader).toBe(-1);
    expect(still.leader_epoch).toBeGreaterThan(since.leader_epoch);
    const again = await elect();
    expect(again.code).toBe(1);
    expect(again.stderr).toContain("which an unclean election at epoch");
    // cluster status names the superseded directory, X being back on it.
    const back = await statusOf(c, "f4");
    expect(back.json.forgotten).toContainEqual(
      expect.objectContaining({ node_id: X, data_dir_id: forgottenDir, superseded: true }),
    );
    expect(back.json.reason).toMatch(
      new RegExp(
        `^node ${X} runs on data directory ${forgottenDir}, which an unclean election at epoch \\d+ superseded`,
      ),
    );
    expect(back.text).toContain(`offline (${back.json.reason})`);
    // The refusal chose X, so X had published by then: the ELR rule had its chance and declined
    // (the controller answers a request after the publication's watch event that came before it).
    expect((await c.state("f4"))!.leader).toBe(-1);
  }, 180_000);
});
