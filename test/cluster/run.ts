/**
 * One Jepsen-style run (issue #16): starts the processes (`cluster-harness.ts`), runs concurrent
 * producers (plain and idempotent) and consumers (plain and group members) through the TS client
 * while the seeded fault schedule (`schedule.ts`) kills, pauses and restarts processes, then heals
 * everything, reads every partition in full through its leader and then, once every replica is in
 * sync and the brokers have stopped cleanly, from each replica's data directory, and checks the
 * history (`checker.ts`).
 *
 * Used by `test/cluster/jepsen.test.ts` (bounded, in `npm test`) and `scripts/jepsen.mjs` (longer).
 *
 * Workload (topic `jepsen`, 2 partitions; replication factor 3 and min ISR 2 in a cluster), every
 * process through its own `ClusterClient` (the metadata's leaders; one broker answers for a
 * single node):
 * - `producer-N`: a plain `TcpClient.produce` of 1–3 new values to one partition at a time,
 *   alternating partitions, on the connection to the partition's leader. Any error is recorded
 *   `info` (the produce may have been stored) and the metadata is read again; the value is never
 *   sent twice, so a plain producer's value stored twice is an anomaly too.
 * - `idem-N`: an `IdempotentProducer` with the `ClusterClient` as its router, alternating
 *   partitions (it retries itself across leaders, deduplicated by the broker); an error after its
 *   delivery timeout is `info`.
 * - `consumer-N`: fetches each partition from its leader on from where it was, one fetch per op.
 * - `member-N`: a `GroupConsumer` of group `jepsen-g` (group requests to the coordinator, fetches
 *   to each partition's leader); each poll is followed by a commit. A poll's (and an acknowledged
 *   commit's) session is the
 *   member's incarnation and how often its generation changed (to any number: generations are
 *   counted per coordinator): a new one may legitimately rewind to the group's
 *   committed offset. After an error the member is replaced by a new one.
 *
 * Failover (reported, not asserted): for each fault that takes a partition's leader away
 * (`kill-leader`, `pause-leader`, `restart-all`), the time from the fault until the first send to
 * an affected partition that was invoked after the fault is acknowledged, and how many records
 * producers tried to write to those partitions meanwhile without an acknowledgement.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import {
  ClusterClient,
  type FetchResponse,
  GroupConsumer,
  IdempotentProducer,
  type TcpClient,
} from "../../src/client/client.ts";
import { expandSpans } from "../../src/client/records.ts";
import { type CheckResult, checkHistory, formatCheckResult } from "./checker.ts";
import { type ClusterBroker, type TestCluster, startCluster } from "./cluster-harness.ts";
import { History, type HistoryRecord } from "./history.ts";
import { readReplicaLog } from "./replica-log.ts";
import {
  type Fault,
  type Schedule,
  describeSchedule,
  makeSchedule,
  seedFromEnv,
} from "./schedule.ts";

/** Options of {@link runJepsen}. */
export interface JepsenOptions {
  seed: number;
  /** false: one plain broker, no etcd (its faults still apply: kill, pause, restart). Default true. */
  cluster?: boolean;
  /** Faults beyond one of each kind (default 0). */
  extraFaults?: number;
  /** More seeded faults until the schedule lasts this long, in ms (default 0: one of each kind). */
  minDurationMs?: number;
  /** Producers and consumers of each kind (default 2). */
  clientsPerKind?: number;
  /** Where progress lines go (default: nowhere). */
  log?: (line: string) => void;
  /** How to print a replay command for the seed (default the test's). */
  replay?: string;
  /** Command words that start es-broker (default: the target's). */
  command?: string[];
}

/** One fault that took leaders away, measured. */
export interface FailoverReport {
  kind: Fault["kind"];
  /** Broker(s) the fault hit. */
  nodes: number[];
  /** Partitions whose leader it hit. */
  partitions: number[];
  /** Fault → first acknowledged send (invoked after the fault) to an affected partition, in ms; null if none. */
  failoverMs: number | null;
  /** Records sent to affected partitions in that window that were not acknowledged. */
  unavailableRecords: number;
}

/** What {@link runJepsen} found. */
export interface JepsenReport {
  schedule: Schedule;
  check: CheckResult;
  failovers: FailoverReport[];
  history: History;
  /** Ops per process kind that completed ok (proof the workload ran). */
  okOps: Record<"producer" | "idem" | "consumer" | "member", number>;
  /**
   * Leaderships the controller moved back to a preferred replica while the workload ran
   * (`cluster.preferred_leader_elected` in the brokers' logs; 0 for a single node).
   */
  preferredMoves: number;
  /** Partitions led by another than their preferred replica when the last fault ended (0 single). */
  displacedAtEnd: number;
  /** Where the processes' logs and the history were saved (when the check failed). */
  logsDir?: string;
  /** The report as text: schedule, failovers, checker counts. */
  text: string;
}

const topic = "jepsen";
const partitions = 2;
const group = "jepsen-g";
const requestTimeoutMs = 5000;
const decoder = new TextDecoder();

interface FaultEvent {
  fault: Fault;
  atMs: number;
  nodes: number[];
  partitions: number[];
}

/** Preferred leader moves in every broker's log so far (docs/cluster.md "Preferred leader election"). */
function countPreferredMoves(cluster: TestCluster): number {
  let n = 0;
  for (const b of cluster.brokers) n += b.eventCounts.get("cluster.preferred_leader_elected") ?? 0;
  return n;
}

/** Runs the whole scenario and checks it; never throws for an anomaly (the caller asserts). */
export async function runJepsen(options: JepsenOptions): Promise<JepsenReport> {
  const log = options.log ?? (() => {});
  const clustered = options.cluster ?? true;
  const perKind = options.clientsPerKind ?? 2;
  const schedule = makeSchedule({
    seed: options.seed,
    extraFaults: options.extraFaults ?? 0,
    minDurationMs: options.minDurationMs ?? 0,
  });
  log(
    describeSchedule(
      schedule,
      options.replay ?? "npx vitest run --project default test/cluster/jepsen.test.ts",
    ),
  );
  // Preferred leader election every second (default 30 s): a broker back from a fault takes its
  // leaderships back while the workload runs, so leadership moves are a fault source too.
  const cluster = await startCluster({
    cluster: clustered,
    command: options.command,
    serveArgs: clustered ? ["--leader-rebalance-ms", "1000"] : [],
  });
  const history = new History();
  const faults: FaultEvent[] = [];
  let stopped = false;
  try {
    const admin = await connectCluster(cluster, () => false);
    await admin.createTopic({
      name: topic,
      partitions,
      ...(clustered ? { config: { replication_factor: 3, min_insync_replicas: 2 } } : {}),
    });
    await admin.close();
    await cluster.waitReady({ topic });

    const okOps = { producer: 0, idem: 0, consumer: 0, member: 0 };
    const isStopped = () => stopped;
    const workers: Promise<void>[] = [];
    for (let i = 0; i < perKind; i++) {
      workers.push(plainProducer(`producer-${i}`, i, cluster, history, isStopped, okOps));
      workers.push(
        idempotentProducer(`idem-${i}`, options.seed, cluster, history, isStopped, okOps),
      );
      workers.push(plainConsumer(`consumer-${i}`, cluster, history, isStopped, okOps));
      workers.push(groupMember(`member-${i}`, cluster, history, isStopped, okOps));
    }

    // The faults, one at a time, on the history's clock.
    for (const fault of schedule.faults) {
      const wait = fault.atMs - history.elapsedMs();
      if (wait > 0) await sleep(wait);
      faults.push(await applyFault(fault, cluster, history, log));
    }
    // Under load, until every leadership is back on its preferred replica (a leader fault that
    // just healed leaves one off it): the move happens while producers write.
    const displacedAtEnd = clustered ? ((await offPreferred(cluster)) ?? partitions) : 0;
    const movedBackFrom = Date.now();
    let movedBackMs: number | null = displacedAtEnd === 0 ? 0 : null;
    for (const until = Date.now() + 45_000; displacedAtEnd > 0 && Date.now() < until; ) {
      if ((await offPreferred(cluster)) === 0) {
        movedBackMs = Date.now() - movedBackFrom;
        break;
      }
      await sleep(200);
    }
    await sleep(3000); // a quiet tail: the last heal settles under load
    stopped = true;
    await Promise.all(workers);
    const preferredMoves = countPreferredMoves(cluster);

    // Heal whatever is still off, then read everything.
    for (const b of cluster.brokers) {
      if (b.state === "paused") b.resume();
      if (b.state === "down") await b.start();
    }
    for (const m of cluster.etcd?.members ?? []) if (m.process === null) await m.restart();
    await cluster.waitReady({ topic });
    await finalRead(cluster, history);
    // Every replica's own copy, from its data directory after a clean stop, once all are in sync.
    await cluster.waitReady({ topic, inSync: true });
    for (const b of cluster.brokers) await b.terminate();
    for (const b of cluster.brokers) {
      for (let partition = 0; partition < partitions; partition++) {
        history.finalRead({ topic, partition }, readReplicaLog(b.dataDir, { topic, partition }), {
          node: b.nodeId,
        });
      }
    }

    const check = checkHistory(history.ops);
    const failovers = faults
      .filter((f) => f.partitions.length > 0)
      .map((f) => measureFailover(f, history));
    const text = [
      formatCheckResult(check),
      `  ok ops: ${okOps.producer} plain sends, ${okOps.idem} idempotent sends, ${okOps.consumer} consumer polls, ${okOps.member} group polls`,
      `  preferred leader moves under load: ${preferredMoves} (${displacedAtEnd} leaderships off their preferred replica when the faults ended, ` +
        `${movedBackMs === null ? "not all back within 45 s" : `all back after ${(movedBackMs / 1000).toFixed(1)} s`})`,
      ...failovers.map(
        (f) =>
          `  failover after ${f.kind} of node ${f.nodes.join(",")} (partitions ${f.partitions.join(",")}): ` +
          `${f.failoverMs === null ? "writes never accepted again" : `${(f.failoverMs / 1000).toFixed(2)} s`}, ` +
          `${f.unavailableRecords} records not acknowledged meanwhile`,
      ),
    ].join("\n");
    log(text);
    const report: JepsenReport = {
      displacedAtEnd,
      schedule,
      check,
      failovers,
      history,
      okOps,
      preferredMoves,
      text,
    };
    if (!check.valid || preferredMoves < displacedAtEnd) {
      report.logsDir = cluster.saveLogs({
        "history.jsonl": history.toJsonLines(),
        "report.txt": `${describeSchedule(schedule, options.replay ?? "")}\n${text}\n`,
      });
      log(`jepsen: logs and history saved in ${report.logsDir}`);
    }
    return report;
  } catch (err) {
    const dir = cluster.saveLogs({ "history.jsonl": history.toJsonLines() });
    throw new Error(
      `jepsen run (seed ${options.seed}) failed: ${(err as Error).stack}\nlogs: ${dir}\n${cluster.logTail(20)}`,
    );
  } finally {
    stopped = true;
    await cluster.stop();
  }
}

/**
 * A routing client over every broker of the run (`ClusterClient`: the metadata's leaders, one
 * connection per broker; a single node answers without a cluster and gets every call), retried
 * until some broker answers or `stop` says to give up.
 */
async function connectCluster(cluster: TestCluster, stop: () => boolean): Promise<ClusterClient> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await ClusterClient.connect({
        bootstrap: cluster.brokers.map((b) => b.tcp),
        timeoutMs: requestTimeoutMs,
        retryTimeoutMs: 20_000,
      });
    } catch (err) {
      if (stop() && attempt > 0) throw err;
      await sleep(Math.min(500, 20 * 2 ** attempt));
    }
  }
}

/**
 * The connection to `partition`'s leader that `router` knows now; null (after a pause) when it
 * knows none or cannot reach it (nothing was sent: no op is recorded).
 */
async function leaderOf(router: ClusterClient, partition: number): Promise<TcpClient | null> {
  try {
    const client = await router.leader(topic, partition);
    if (!client.closed) return client;
    throw new Error("closed");
  } catch {
    await router.refresh().catch(() => {});
    await sleep(100);
    return null;
  }
}

function toRecords(partition: number, values: string[]): HistoryRecord[] {
  return values.map((value) => ({ topic, partition, value }));
}

async function plainProducer(
  name: string,
  index: number,
  cluster: TestCluster,
  history: History,
  stopped: () => boolean,
  okOps: JepsenReport["okOps"],
): Promise<void> {
  const router = await connectCluster(cluster, stopped).catch(() => null);
  if (router === null) return;
  let n = 0;
  while (!stopped()) {
    const partition = (index + n) % partitions;
    const client = await leaderOf(router, partition);
    if (client === null) continue;
    const values = Array.from({ length: 1 + (n % 3) }, (_, i) => `${name}-${n}-${i}`);
    n++;
    const op = history.invoke(name, "send", { records: toRecords(partition, values) });
    try {
      const result = await client.produce(
        topic,
        values.map((v) => ({ value: v })),
        { partition },
      );
      op.ok(storedRecords(values, result.spans));
      okOps.producer++;
    } catch (err) {
      op.info(err);
      await router.refresh().catch(() => {});
      await sleep(50);
    }
    await sleep(10);
  }
  await router.close().catch(() => {});
}

async function idempotentProducer(
  name: string,
  seed: number,
  cluster: TestCluster,
  history: History,
  stopped: () => boolean,
  okOps: JepsenReport["okOps"],
): Promise<void> {
  const router = await connectCluster(cluster, stopped).catch(() => null);
  if (router === null) return;
  const producer = new IdempotentProducer({
    connect: async () => (await connectCluster(cluster, () => false)).leader(topic, 0),
    router,
    producerId: `jepsen-${seed}-${name}`,
    deliveryTimeoutMs: 20_000,
    retryBackoffMaxMs: 250,
  });
  let n = 0;
  while (!stopped()) {
    const partition = n % partitions;
    const values = Array.from({ length: 1 + (n % 2) }, (_, i) => `${name}-${n}-${i}`);
    n++;
    const op = history.invoke(name, "send", {
      records: toRecords(partition, values),
      idempotent: true,
    });
    try {
      const result = await producer.send(
        topic,
        values.map((v) => ({ value: v })),
        { partition },
      );
      op.ok(storedRecords(values, result.spans));
      okOps.idem++;
    } catch (err) {
      op.info(err);
      await sleep(50);
    }
    await sleep(10);
  }
  await producer.close().catch(() => {});
  await router.close().catch(() => {});
}

/** The records a produce of `values` stored: each at the partition and offset its answer's spans give. */
function storedRecords(
  values: readonly string[],
  spans: Parameters<typeof expandSpans>[0],
): HistoryRecord[] {
  const positions = expandSpans(spans);
  return values.map((value, i) => ({
    topic,
    partition: positions[i].partition,
    offset: positions[i].offset,
    value,
  }));
}

function fetched(partition: number, res: FetchResponse): HistoryRecord[] {
  return res.records.map((r) => ({
    topic,
    partition,
    offset: r.offset,
    value: decoder.decode(r.value),
  }));
}

async function plainConsumer(
  name: string,
  cluster: TestCluster,
  history: History,
  stopped: () => boolean,
  okOps: JepsenReport["okOps"],
): Promise<void> {
  const positions = Array.from({ length: partitions }, () => 0);
  const router = await connectCluster(cluster, stopped).catch(() => null);
  if (router === null) return;
  let n = 0;
  while (!stopped()) {
    const partition = n++ % partitions;
    const client = await leaderOf(router, partition);
    if (client === null) continue;
    const op = history.invoke(name, "poll", { records: [] });
    try {
      const res = await client.fetch({
        topic,
        partition,
        offset: positions[partition],
        maxRecords: 200,
        waitMs: 100,
      });
      op.ok(fetched(partition, res));
      positions[partition] = res.nextOffset;
      okOps.consumer++;
    } catch (err) {
      op.info(err);
      await router.refresh().catch(() => {});
      await sleep(50);
    }
  }
  await router.close().catch(() => {});
}

async function groupMember(
  name: string,
  cluster: TestCluster,
  history: History,
  stopped: () => boolean,
  okOps: JepsenReport["okOps"],
): Promise<void> {
  const router = await connectCluster(cluster, stopped).catch(() => null);
  if (router === null) return;
  let incarnation = 0;
  // A session ends whenever the generation changes, to any number: a generation is counted by
  // one coordinator, and another one (after the controller moved) may count from lower again.
  let session = 0;
  let lastGeneration = Number.NaN;
  let member: GroupConsumer | null = null;
  const drop = async () => {
    await member?.close({ leave: false }).catch(() => {});
    member = null;
    await router.refresh().catch(() => {});
  };
  while (!stopped()) {
    if (member === null) {
      try {
        // Group requests go to the coordinator; each partition's fetches to its leader.
        member = await GroupConsumer.join({
          client: await router.coordinator(),
          router,
          group,
          topics: [topic],
          sessionTimeoutMs: 6000,
          maxRecords: 200,
        });
        incarnation++;
        session++;
        lastGeneration = member.generation;
      } catch {
        await drop();
        if (stopped()) break;
        await sleep(200);
        continue;
      }
    }
    const m: GroupConsumer = member;
    const sessionOf = (generation: number) => {
      if (generation !== lastGeneration) {
        session++;
        lastGeneration = generation;
      }
      return `${incarnation}.${session} (generation ${generation})`;
    };
    const op = history.invoke(name, "poll", { records: [], group });
    let polled = false;
    try {
      const started = performance.now();
      const batches = await m.poll({ waitMs: 100 });
      polled = true;
      // A poll that gives up at once (its fetches failed over to a new leader) is not a wait.
      if (batches.length === 0 && performance.now() - started < 50) await sleep(50);
      op.ok(
        batches.flatMap((b) =>
          b.records.map((r) => ({
            topic: b.topic,
            partition: b.partition,
            offset: r.offset,
            value: decoder.decode(r.value),
          })),
        ),
        { session: sessionOf(m.generation) },
      );
      okOps.member++;
      // The offsets this commit moves (the next offset of each partition just read); recorded
      // only when acknowledged, so the checker can tell a committed offset that went backwards.
      const next = new Map<number, number>();
      for (const b of batches)
        for (const r of b.records)
          next.set(b.partition, Math.max(next.get(b.partition) ?? 0, r.offset + 1));
      const commit =
        next.size === 0
          ? null
          : history.invoke(name, "commit", {
              group,
              records: [...next].map(([partition, offset]) => ({
                topic,
                partition,
                offset,
                value: "",
              })),
            });
      let committed: boolean;
      try {
        committed = await m.commit();
      } catch (err) {
        commit?.info(err);
        throw err;
      }
      // The session it ended in: a commit that rejoined began the next one (the checker's floor).
      if (committed) commit?.ok(undefined, { session: sessionOf(m.generation) });
      else commit?.fail("stale generation: not committed");
    } catch (err) {
      if (!polled) op.info(err); // a failed commit: the records stay recorded, the next owner reads them again
      await drop();
      await sleep(100);
    }
  }
  await drop();
  await router.close().catch(() => {});
}

/** How many partitions are led by another than their first replica now, or null if unknown. */
async function offPreferred(cluster: TestCluster): Promise<number | null> {
  const m = await cluster.metadata(topic).catch(() => null);
  const ps = m?.topics[0]?.partitions;
  if (ps === undefined || ps.length === 0) return null;
  return ps.filter((p) => p.leader !== p.replicas[0]).length;
}

/** The partitions each broker leads now (single node: every partition on node 1). */
async function leaders(cluster: TestCluster): Promise<Map<number, number>> {
  const out = new Map<number, number>();
  if (cluster.etcd === null) {
    for (let p = 0; p < partitions; p++) out.set(p, cluster.brokers[0].nodeId);
    return out;
  }
  const m = await cluster.metadata(topic);
  for (const p of m?.topics[0]?.partitions ?? []) if (p.leader >= 0) out.set(p.partition, p.leader);
  return out;
}

async function applyFault(
  fault: Fault,
  cluster: TestCluster,
  history: History,
  log: (line: string) => void,
): Promise<FaultEvent> {
  const byNode = (id: number) => cluster.brokers.find((b) => b.nodeId === id)!;
  const led = await leaders(cluster).catch(() => new Map<number, number>());
  const leaderNodes = [...new Set(led.values())].sort((a, b) => a - b);
  const partitionsOf = (id: number) => [...led].filter(([, n]) => n === id).map(([p]) => p);
  const at = history.elapsedMs();
  const event = (nodes: number[], parts: number[]): FaultEvent => ({
    fault,
    atMs: at,
    nodes,
    partitions: parts,
  });
  const say = (what: string) => log(`jepsen: ${(at / 1000).toFixed(1)} s: ${what}`);
  const downAndUp = async (b: ClusterBroker) => {
    await b.kill();
    await sleep(fault.durationMs);
    await b.start();
  };
  switch (fault.kind) {
    case "kill-leader":
    case "pause-leader": {
      const candidates =
        leaderNodes.length > 0 ? leaderNodes : cluster.brokers.map((b) => b.nodeId);
      const victim = byNode(candidates[fault.pick % candidates.length]);
      const ev = event([victim.nodeId], partitionsOf(victim.nodeId));
      if (fault.kind === "kill-leader") {
        say(
          `SIGKILL leader node ${victim.nodeId} (partitions ${ev.partitions.join(",")}) for ${fault.durationMs} ms`,
        );
        await downAndUp(victim);
      } else {
        say(
          `SIGSTOP leader node ${victim.nodeId} (partitions ${ev.partitions.join(",")}) for ${fault.durationMs} ms`,
        );
        victim.pause();
        await sleep(fault.durationMs);
        victim.resume();
      }
      return ev;
    }
    case "kill-follower": {
      if (cluster.brokers.length === 1) {
        say("kill-follower: a single node has no follower, skipped");
        return event([], []);
      }
      const followers = cluster.brokers
        .map((b) => b.nodeId)
        .filter((id) => !leaderNodes.includes(id));
      const candidates = followers.length > 0 ? followers : cluster.brokers.map((b) => b.nodeId);
      const victim = byNode(candidates[fault.pick % candidates.length]);
      say(`SIGKILL follower node ${victim.nodeId} for ${fault.durationMs} ms`);
      await downAndUp(victim);
      return event([victim.nodeId], partitionsOf(victim.nodeId));
    }
    case "kill-etcd": {
      if (cluster.etcd === null) {
        say("kill-etcd: a single node runs without etcd, skipped");
        return event([], []);
      }
      const member = cluster.etcd.members[fault.pick % cluster.etcd.members.length];
      say(`SIGKILL etcd member ${member.name} for ${fault.durationMs} ms`);
      await member.kill();
      await sleep(fault.durationMs);
      await member.restart();
      return event([], []);
    }
    case "restart-all": {
      say(`SIGKILL every broker, start them again after ${fault.durationMs} ms`);
      await cluster.restartAll({ downMs: fault.durationMs });
      return event(
        cluster.brokers.map((b) => b.nodeId),
        Array.from({ length: partitions }, (_, p) => p),
      );
    }
  }
}

/** Reads every partition from its log start to its high watermark, through its leader, into the history. */
async function finalRead(cluster: TestCluster, history: History): Promise<void> {
  const deadline = Date.now() + 60_000;
  const router = await connectCluster(cluster, () => Date.now() > deadline);
  try {
    for (let partition = 0; partition < partitions; partition++) {
      for (;;) {
        try {
          const client = await router.leader(topic, partition);
          const bounds = await client.listOffsets({ topic, partition });
          const records: HistoryRecord[] = [];
          let offset = bounds.logStartOffset;
          while (offset < bounds.highWatermark) {
            const res = await client.fetch({ topic, partition, offset, maxRecords: 5000 });
            records.push(...fetched(partition, res));
            if (res.nextOffset <= offset)
              throw new Error(`fetch at ${offset} of ${topic}/${partition} did not advance`);
            offset = res.nextOffset;
          }
          history.finalRead({ topic, partition }, records);
          break;
        } catch (err) {
          if (Date.now() > deadline)
            throw new Error(
              `final read of ${topic}/${partition} failed: ${(err as Error).message}`,
            );
          await router.refresh().catch(() => {});
          await sleep(200);
        }
      }
    }
  } finally {
    await router.close().catch(() => {});
  }
}

/** Failover time and unacknowledged records of one fault (module comment). */
function measureFailover(event: FaultEvent, history: History): FailoverReport {
  const affected = new Set(event.partitions);
  const affectedSend = (op: (typeof history.ops)[number]) =>
    op.f === "send" && op.records.length > 0 && affected.has(op.records[0].partition);
  // The first acknowledgement of a send invoked after the fault.
  const invokedAt = new Map<string, number>();
  let recoveredAt: number | null = null;
  let unavailable = 0;
  for (const op of history.ops) {
    if (!affectedSend(op)) continue;
    if (op.type === "invoke") {
      invokedAt.set(op.process, op.timeMs);
      continue;
    }
    const t = invokedAt.get(op.process);
    invokedAt.delete(op.process);
    if (t === undefined || t < event.atMs || op.type !== "ok") continue;
    if (recoveredAt === null || op.timeMs < recoveredAt) recoveredAt = op.timeMs;
  }
  // Records sent to affected partitions between the fault and the recovery, not acknowledged.
  const end = recoveredAt ?? Number.POSITIVE_INFINITY;
  const started = new Map<string, { timeMs: number; count: number }>();
  for (const op of history.ops) {
    if (!affectedSend(op)) continue;
    if (op.type === "invoke") {
      started.set(op.process, { timeMs: op.timeMs, count: op.records.length });
      continue;
    }
    const inv = started.get(op.process);
    started.delete(op.process);
    if (inv === undefined || op.type === "ok") continue;
    if (op.timeMs >= event.atMs && inv.timeMs <= end) unavailable += inv.count;
  }
  return {
    kind: event.fault.kind,
    nodes: event.nodes,
    partitions: event.partitions,
    failoverMs: recoveredAt === null ? null : recoveredAt - event.atMs,
    unavailableRecords: unavailable,
  };
}

/** `node scripts/jepsen.mjs --help`. */
const jepsenUsage = `Usage: node scripts/jepsen.mjs [--minutes N] [--seed S] [--mode cluster|single]
  --minutes N   how long the workload runs under faults (default 5)
  --seed S      the fault schedule's seed (default: ES_BROKER_JEPSEN_SEED, else random; printed)
  --mode M      cluster (three brokers, three etcd members; default) or single (one broker)
Exit 0: the history is valid; 1: an anomaly (the report names it); 2: a usage error.`;

/**
 * `scripts/jepsen.mjs`: a longer run. Flags: `--seed N` (default: `ES_BROKER_JEPSEN_SEED` or a fresh
 * one), `--minutes M` (fault schedule length, default 5), `--mode single|cluster` (default cluster).
 * Returns the exit code: 0 when the checker found nothing, 1 otherwise, 2 for a usage error.
 */
export async function main(argv: string[], options: { command: string[] }): Promise<number> {
  let values: { seed?: string; minutes?: string; mode?: string; help?: boolean };
  try {
    ({ values } = parseArgs({
      args: argv,
      options: {
        seed: { type: "string" },
        minutes: { type: "string" },
        mode: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
    }));
  } catch (err) {
    console.error(`jepsen: ${(err as Error).message}\n${jepsenUsage}`);
    return 2;
  }
  if (values.help) {
    console.log(jepsenUsage);
    return 0;
  }
  const seed = seedFromEnv(
    values.seed === undefined ? process.env : { ES_BROKER_JEPSEN_SEED: values.seed },
  );
  const minutes = Number(values.minutes ?? "5");
  if (!(minutes > 0))
    throw new Error(`--minutes must be a positive number, got "${values.minutes}"`);
  const mode = values.mode ?? "cluster";
  if (mode !== "single" && mode !== "cluster")
    throw new Error(`--mode must be "single" or "cluster", got "${mode}"`);
  const report = await runJepsen({
    seed,
    cluster: mode === "cluster",
    minDurationMs: minutes * 60_000,
    command: options.command,
    replay: `node scripts/jepsen.mjs --minutes ${minutes} --mode ${mode}`,
    log: (line) => console.log(line),
  });
  return report.check.valid ? 0 : 1;
}
