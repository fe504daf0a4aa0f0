/**
 * The crash-safety simulation (issue "Crash safety"): a seeded workload against a real
 * {@link LocalBroker} on a simulated disk ({@link MemoryFileSystem}), with crashes and I/O faults
 * at seeded points, recovery, and the invariants of `model.ts` checked after every step.
 *
 * One run, from one seed:
 * 1. The seed picks a configuration: partitions (1–4), `segment_bytes` (1–8 KiB, so segments roll
 *    every few requests and the 4 KiB index interval is crossed), sometimes a short `segment_ms`,
 *    `--flush-every-records` (1 mostly, sometimes 2–7), whether a failed fsync drops dirty pages,
 *    and how much the disk calls are jittered.
 * 2. Steps, each drawn from the seed: concurrent produce requests (one or several partitions per
 *    request, keys absent / empty / present, explicit or broker-stamped timestamps), fetches at
 *    random offsets, clock advances (flush timers, `segment_ms` rolls), clean restarts, creating
 *    another topic, arming one I/O fault (ENOSPC after k bytes, EIO on a write / fsync / rename /
 *    truncate / create / directory fsync, a failed write whose cut or the cut's fsync fails too,
 *    or a countdown on the Nth mutation), arming a crash k mutations ahead (so power fails in the
 *    middle of a group commit, a roll or a recovery), or crashing between steps. After a step in
 *    which a fault fired, the fenced rules are checked at once (every partition read in full,
 *    every partition probed with an append).
 *
 * Waiting: each step ends by draining the microtask queue (three setImmediate turns; the
 * simulated disk never waits on anything else), and every request must have settled by then.
 * 3. After a crash (MemoryFileSystem.crash with a seed drawn here: random / drop-all / keep-all), a
 *    new incarnation recovers the same disk — sometimes with another crash or a fault during
 *    recovery — and every partition is read in full and checked.
 *
 * Nothing here reads the wall clock, real timers or Math.random: the clock is a ManualClock, the
 * disk is in memory, randomness comes from {@link Prng}, and waiting for requests to settle only
 * drains the microtask queue. So a seed replays exactly: `npm run sim -- --seed N`.
 */
import { MemoryFileSystem, type CrashMode } from "../../src/fs/memory.ts";
import { LocalBroker } from "../../src/broker/broker.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { Prng } from "../../src/lib/prng.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import {
  Model,
  SimViolation,
  decodeServed,
  maxValidOffsetOnDisk,
  type PartitionModel,
  type SentRequest,
} from "./model.ts";

export { SimViolation } from "./model.ts";

/** The data directory inside the simulated disk. */
export const dataDir = "/data";

/** Options of {@link runSimulation}. */
export interface SimOptions {
  seed: number;
  /** Steps of the workload (default: 30–70, drawn from the seed). */
  steps?: number;
  /** Receives one line per thing that happens (the replay command prints them). */
  log?: (line: string) => void;
  /** Also log every disk mutation (very verbose). */
  logMutations?: boolean;
  /** Fixes parts of the configuration instead of drawing them from the seed. */
  config?: Partial<SimConfig>;
}

/** The configuration of one simulated machine (drawn from the seed unless given). */
export interface SimConfig {
  /** Partitions of the topic "sim" (1–4). */
  partitionCount: number;
  /** `segment_bytes` of every topic. */
  segmentBytes: number;
  /** `segment_ms` of "sim", or undefined for the default. */
  segmentMs: number | undefined;
  /** `--flush-every-records`. */
  flushEveryRecords: number;
  /** Most microtask turns a disk call is delayed (MemoryFileSystem `jitter`). */
  jitterMax: number;
  /** Whether a failed fsync loses the dirty pages (MemoryFileSystem option). */
  failedSyncDropsDirtyData: boolean;
}

/** What a run did, for summaries. */
export interface SimSummary {
  seed: number;
  steps: number;
  incarnations: number;
  crashes: number;
  cleanRestarts: number;
  faultsFired: number;
  fencings: number;
  requests: number;
  acked: number;
  failed: number;
  corruptReports: number;
  tornTailsCut: number;
}

/** A failure of one seed: the violation, the seed, and the last lines of the trace. */
export class SimFailure extends Error {
  override name = "SimFailure";
  constructor(
    readonly seed: number,
    override readonly cause: unknown,
    readonly trace: string[],
  ) {
    const what = cause instanceof Error ? `${cause.name}: ${cause.message}` : String(cause);
    super(
      `seed=${seed} failed: ${what}\n  replay: npm run sim -- --seed ${seed}\n  last steps:\n    ${trace.join("\n    ")}`,
    );
    if (cause instanceof Error && cause.stack) this.stack = `${this.message}\n${cause.stack}`;
  }
}

/** Error codes a rejected produce may carry (docs/decisions.md §7; the error table). */
const produceErrorCodes = new Set(["partition_fenced", "storage_error", "unavailable"]);

interface TopicModel {
  name: string;
  partitions: number;
  /** createTopic resolved: the topic must exist after every restart. */
  acked: boolean;
}

interface Tracked<T> {
  promise: Promise<T>;
  settled: boolean;
  ok: boolean;
  value?: T;
  error?: unknown;
}

function track<T>(promise: Promise<T>): Tracked<T> {
  const t: Tracked<T> = { promise, settled: false, ok: false };
  promise.then(
    (value) => Object.assign(t, { settled: true, ok: true, value }),
    (error: unknown) => Object.assign(t, { settled: true, ok: false, error }),
  );
  return t;
}

/** Lets every microtask run (the simulated disk never waits on anything else). */
export async function drainMicrotasks(): Promise<void> {
  for (let i = 0; i < 3; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

function errorText(err: unknown): string {
  if (err instanceof BrokerError) return `${err.kind.code}: ${err.message}`;
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

/**
 * Runs one seed. Resolves with a summary, or rejects with a {@link SimFailure} naming the seed,
 * the broken invariant and the last steps.
 */
export async function runSimulation(options: SimOptions): Promise<SimSummary> {
  const sim = new Simulation(options);
  try {
    await sim.run();
  } catch (err) {
    throw new SimFailure(options.seed, err, sim.traceTail());
  }
  return sim.summary;
}

/** One simulated machine: the disk, the model, and the broker incarnations that run on it. */
export class Simulation {
  readonly seed: number;
  readonly prng: Prng;
  readonly model = new Model();
  readonly mem: MemoryFileSystem;
  readonly summary: SimSummary;
  readonly #log: ((line: string) => void) | undefined;
  readonly #logMutations: boolean;
  #trace: string[] = [];

  // Configuration drawn from the seed.
  readonly partitionCount: number;
  readonly segmentBytes: number;
  readonly segmentMs: number | undefined;
  readonly flushEveryRecords: number;
  readonly jitterMax: number;
  readonly stepCount: number;

  // The current incarnation.
  incarnation = 0;
  /** The boot of {@link mem} the current incarnation runs on (jittered, with its own power). */
  fs!: MemoryFileSystem;
  clock!: ManualClock;
  logger!: MemoryLogger;
  broker: LocalBroker | null = null;
  timeMs = 1_700_000_000_000;
  topics = new Map<string, TopicModel>();
  firedSeen = 0;

  constructor(options: SimOptions) {
    this.seed = options.seed;
    this.prng = new Prng(options.seed);
    this.#log = options.log;
    this.#logMutations = options.logMutations ?? false;
    const p = this.prng;
    const drawn: SimConfig = {
      partitionCount: 1 + p.int(4),
      segmentBytes: [1024, 1024, 1536, 2048, 3000, 8192][p.int(6)],
      segmentMs: p.chance(0.2) ? 20 + p.int(300) : undefined,
      flushEveryRecords: p.chance(0.8) ? 1 : 2 + p.int(6),
      jitterMax: p.int(4),
      failedSyncDropsDirtyData: p.chance(0.75),
    };
    const config = { ...drawn, ...options.config };
    this.partitionCount = config.partitionCount;
    this.segmentBytes = config.segmentBytes;
    this.segmentMs = config.segmentMs;
    this.flushEveryRecords = config.flushEveryRecords;
    this.jitterMax = config.jitterMax;
    const dropsDirty = config.failedSyncDropsDirtyData;
    this.stepCount = options.steps ?? 30 + p.int(41);
    this.mem = new MemoryFileSystem({ seed: p.nextU32(), failedSyncDropsDirtyData: dropsDirty });
    this.summary = {
      seed: options.seed,
      steps: 0,
      incarnations: 0,
      crashes: 0,
      cleanRestarts: 0,
      faultsFired: 0,
      fencings: 0,
      requests: 0,
      acked: 0,
      failed: 0,
      corruptReports: 0,
      tornTailsCut: 0,
    };
    this.trace(
      `config: partitions=${this.partitionCount} segment_bytes=${this.segmentBytes} segment_ms=${this.segmentMs ?? "default"} ` +
        `flush_every_records=${this.flushEveryRecords} failed_fsync_drops_dirty=${dropsDirty} jitter=${this.jitterMax} steps=${this.stepCount}`,
    );
  }

  trace(line: string): void {
    const text = `[inc ${this.incarnation}] ${line}`;
    this.#trace.push(text);
    if (this.#trace.length > 40) this.#trace.shift();
    this.#log?.(text);
  }

  traceTail(): string[] {
    return [...this.#trace];
  }

  get durableAcks(): boolean {
    return this.flushEveryRecords === 1;
  }

  // ---------------------------------------------------------------- incarnations

  /** Opens a broker on a fresh boot of the disk; returns false if its power was cut during open. */
  async openBroker(plan: { crashIn?: number; faultN?: number } = {}): Promise<boolean> {
    this.incarnation++;
    this.summary.incarnations++;
    this.fs = new MemoryFileSystem({
      disk: this.mem,
      jitter: { seed: this.prng.nextU32(), maxTurns: this.jitterMax },
      onPowerCut: (cut) => this.onCrash(cut.report!, `${cut.op} ${cut.path}`),
      onMutation: this.#logMutations
        ? (m) => this.trace(`fs: #${m.mutation} ${m.op} ${m.path}${m.detail}`)
        : undefined,
    });
    if (plan.crashIn !== undefined)
      this.fs.armPowerCut({
        inMutations: plan.crashIn,
        crash: { seed: this.prng.nextU32(), mode: this.crashMode() },
      });
    if (plan.faultN !== undefined) this.mem.faults.failNth({ n: plan.faultN, code: "EIO" });
    const faulty = this.mem.faults.armed > 0;
    this.clock = new ManualClock(this.timeMs);
    this.logger = new MemoryLogger();
    this.trace(
      `open broker${plan.crashIn ? ` (crash in ${plan.crashIn} mutations)` : ""}${plan.faultN ? ` (EIO on mutation ${plan.faultN})` : ""}`,
    );
    try {
      this.broker = await LocalBroker.open({
        fs: this.fs,
        dataDir,
        clock: this.clock,
        logger: this.logger,
        flushEveryRecords: this.flushEveryRecords,
        flushIntervalMs: 100,
      });
    } catch (err) {
      this.broker = null;
      if (this.fs.poweredOff || faulty) {
        this.trace(`open failed as it may: ${errorText(err)}`);
        return false;
      }
      throw new SimViolation(
        "recovery",
        `LocalBroker.open rejected without any fault: ${errorText(err)}`,
      );
    }
    this.noteRecoveryEvents();
    return !this.fs.poweredOff;
  }

  crashMode(): CrashMode {
    const r = this.prng.int(10);
    return r < 7 ? "random" : r < 9 ? "dropAll" : "keepAll";
  }

  onCrash(
    report: {
      writesApplied: number;
      writesDropped: number;
      writesTorn: number;
      entriesReverted: number;
    },
    where: string,
  ): void {
    this.summary.crashes++;
    this.trace(
      `POWER LOSS before ${where}: writes applied ${report.writesApplied}, dropped ${report.writesDropped}, torn ${report.writesTorn}; entries reverted ${report.entriesReverted}`,
    );
  }

  noteRecoveryEvents(): void {
    for (const e of this.logger.events) {
      const partition = typeof e.fields.partition === "string" ? e.fields.partition : null;
      if (e.event === "recovery.torn_tail_cut") {
        this.summary.tornTailsCut++;
        this.trace(
          `recovery: torn tail cut in ${partition} (${e.fields.cut_bytes} bytes: ${e.fields.reason})`,
        );
      }
      if (e.event === "recovery.corrupt_segment" || e.event === "read.corrupt_segment") {
        this.summary.corruptReports++;
        this.trace(
          `recovery: corrupt segment ${e.fields.segment} at ${e.fields.position}: ${e.fields.reason}`,
        );
        if (partition !== null) {
          const [topic, p] = partition.split("/");
          this.model.partition(topic, Number(p)).corruptReported = true;
        }
      }
    }
  }

  /**
   * After a crash: recovers until an incarnation opens without dying, then checks everything.
   * Sometimes power fails again during recovery, or a fault hits it; then another start follows.
   */
  async recover(): Promise<void> {
    this.mem.faults.clear();
    for (let attempt = 0; ; attempt++) {
      const r = attempt < 3 ? this.prng.int(10) : 9;
      if (r === 0) {
        // Power fails again during recovery.
        const alive = await this.openBroker({ crashIn: 1 + this.prng.int(12) });
        if (!alive) {
          await drainMicrotasks();
          continue;
        }
        this.fs.armPowerCut(null);
      } else if (r === 1) {
        // An I/O error during recovery: the broker may make a topic unavailable, never lose data.
        const opened = await this.openBroker({ faultN: 1 + this.prng.int(15) });
        this.mem.faults.clear();
        if (opened && this.broker !== null) {
          await this.checkTopicsAvailable({ faultDuringOpen: true });
          await this.verifyAll("after a fault during recovery");
        }
        if (this.broker !== null) await this.closeBroker("restart after a fault during recovery");
        this.fs.cutPower();
        continue;
      } else {
        const alive = await this.openBroker();
        if (!alive)
          throw new SimViolation(
            "recovery",
            "the simulated disk died during a start without a planned crash",
          );
      }
      await this.verifyAfterRecovery();
      return;
    }
  }

  async closeBroker(why: string): Promise<void> {
    const broker = this.broker!;
    this.trace(`close broker (${why})`);
    try {
      await broker.close();
    } catch (err) {
      throw new SimViolation("close", `LocalBroker.close rejected: ${errorText(err)}`);
    }
    this.broker = null;
  }

  // ---------------------------------------------------------------- the run

  async run(): Promise<void> {
    const alive = await this.openBroker();
    if (!alive) throw new SimViolation("recovery", "the first start died");
    const config: Record<string, unknown> = { segment_bytes: this.segmentBytes };
    if (this.segmentMs !== undefined) config.segment_ms = this.segmentMs;
    await this.broker!.createTopic({ name: "sim", partitions: this.partitionCount, config });
    this.topics.set("sim", { name: "sim", partitions: this.partitionCount, acked: true });
    this.trace(`created topic sim with ${this.partitionCount} partitions`);

    let crashArmedOn: MemoryFileSystem | null = null;
    for (let step = 0; step < this.stepCount; step++) {
      this.summary.steps++;
      const crashArmed = crashArmedOn === this.fs;
      const r = this.prng.int(100);
      if (r < 45) await this.stepProduce();
      else if (r < 70) await this.stepFetch();
      else if (r < 77) this.stepAdvance();
      else if (r < 81) await this.stepCleanRestart();
      else if (r < 84) this.stepCrashNow();
      else if (r < 89 && !crashArmed) {
        const k = 1 + this.prng.int(40);
        this.fs.armPowerCut({
          inMutations: k,
          crash: { seed: this.prng.nextU32(), mode: this.crashMode() },
        });
        crashArmedOn = this.fs;
        this.trace(`armed: power loss in ${k} mutations`);
      } else if (r < 95) this.stepArmFault();
      else if (r < 97) await this.stepCreateTopic();
      else await this.verifyAll("in-incarnation check");

      await drainMicrotasks();
      if (!this.fs.poweredOff) await this.afterStep();
      if (this.fs.poweredOff) {
        this.broker = null;
        for (const pm of this.model.partitions.values()) pm.ackedVolatile.clear();
        await this.recover();
      }
    }
    // End: one last power loss (half the time dropping everything unsynced, the sharpest test
    // of what was acknowledged), recovery and a full check.
    this.stepCrashNow(this.prng.chance(0.5) ? "dropAll" : undefined);
    this.broker = null;
    for (const pm of this.model.partitions.values()) pm.ackedVolatile.clear();
    await this.recover();
    if (this.broker !== null) await this.closeBroker("end of run");
  }

  /** After a step on a live disk: fencing observed, and if a fault fired, the fenced rules. */
  async afterStep(): Promise<void> {
    const broker = this.broker!;
    const fired = this.mem.faults.fired.length;
    const newFaults = fired > this.firedSeen;
    if (newFaults) {
      for (const f of this.mem.faults.fired.slice(this.firedSeen))
        this.trace(`fault fired: mutation ${f.mutation} ${f.op} ${f.path} ${f.code}`);
      this.summary.faultsFired += fired - this.firedSeen;
      this.firedSeen = fired;
    }
    for (const topic of await broker.listTopics()) {
      for (const p of topic.partitions) {
        const pm = this.model.partition(topic.name, p.partition);
        if (p.fenced && pm.fencedIn !== this.incarnation) {
          pm.fencedIn = this.incarnation;
          this.summary.fencings++;
          this.trace(`${topic.name}/${p.partition} is fenced`);
        }
      }
    }
    if (newFaults && this.mem.faults.armed === 0) {
      // docs/decisions.md §7: a fenced partition still serves what it acknowledged; the others keep working.
      await this.verifyAll("after a fault");
      await this.probeAppends();
    }
  }

  /** Every partition accepts an append unless it is fenced, and a fenced one refuses it. */
  async probeAppends(): Promise<void> {
    for (const topic of await this.broker!.listTopics()) {
      for (const p of topic.partitions) {
        const t = await this.produceOne(topic.name, p.partition);
        const pm = this.model.partition(topic.name, p.partition);
        if (this.fs.poweredOff) return;
        if (pm.fencedIn === this.incarnation) continue; // checked inside produceOne
        if (!t.ok)
          throw new SimViolation(
            "fenced",
            `${topic.name}/${p.partition} is not fenced but refused an append after a fault elsewhere: ${errorText(t.error)}`,
          );
      }
    }
  }

  // ---------------------------------------------------------------- steps

  availableTopics(): TopicModel[] {
    return [...this.topics.values()].filter((t) => t.partitions > 0);
  }

  makeEntries(
    topic: string,
    partition: number,
    count: number,
  ): { key: Uint8Array | null; value: Uint8Array; timestampMs: number; sendTs: number }[] {
    const p = this.prng;
    const out = [];
    for (let i = 0; i < count; i++) {
      const k = p.int(4);
      const key = k === 0 ? null : k === 1 ? new Uint8Array(0) : randomBytes(p, 1 + p.int(12));
      const value = randomBytes(p, 4 + p.int(p.chance(0.1) ? 1500 : 200));
      const explicit = p.chance(0.5);
      const sendTs = explicit
        ? Math.max(0, this.clock.nowMs() - p.int(100_000) + (p.chance(0.1) ? p.int(1000) : 0))
        : -1;
      out.push({ key, value, timestampMs: explicit ? sendTs : this.clock.nowMs(), sendTs });
    }
    void topic;
    void partition;
    return out;
  }

  /** Sends one produce request to one or more partitions; returns the tracked promise. */
  async sendProduce(
    topic: TopicModel,
    targets: number[],
    perRecord: boolean,
  ): Promise<{ t: Tracked<unknown>; requests: SentRequest[]; expectFenced: boolean }> {
    const broker = this.broker!;
    // Entries per record, in request order.
    const count = targets.length;
    const recordPartitions: number[] = [];
    for (let i = 0; i < count; i++) recordPartitions.push(targets[i]);
    const entries = this.makeEntries(topic.name, -1, count);
    // Records of each partition form one sub-request, in order.
    const byPartition = new Map<number, typeof entries>();
    recordPartitions.forEach((part, i) => {
      if (!byPartition.has(part)) byPartition.set(part, []);
      byPartition.get(part)!.push(entries[i]);
    });
    const requests = new Map<number, SentRequest>();
    for (const [part, es] of byPartition)
      requests.set(part, this.model.newRequest(topic.name, part, es));
    // Stamp the value of each record with its id.
    const builder = new EntryBatchBuilder();
    const cursorIndex = new Map<number, number>();
    for (let i = 0; i < count; i++) {
      const part = recordPartitions[i];
      const idx = cursorIndex.get(part) ?? 0;
      cursorIndex.set(part, idx + 1);
      const record = requests.get(part)!.records[idx];
      new DataView(record.value.buffer, record.value.byteOffset, 4).setUint32(0, record.id);
      builder.add(record.key, record.value, entries[i].sendTs);
    }
    let expectFenced = false;
    const description = await broker.describeTopic(topic.name).catch(() => null);
    for (const part of byPartition.keys())
      if (description?.partitions[part]?.fenced) expectFenced = true;
    const batch = builder.build();
    const t = track(
      broker.produce(
        perRecord
          ? { topic: topic.name, partitions: Int32Array.from(recordPartitions), batch }
          : { topic: topic.name, partition: recordPartitions[0], batch },
      ),
    );
    this.summary.requests++;
    const ids = [...requests.values()]
      .map((r) => `#${r.id}→${r.partition} (${r.records.length})`)
      .join(", ");
    this.trace(`produce ${topic.name} ${ids}${expectFenced ? " [partition fenced]" : ""}`);
    return { t, requests: [...requests.values()], expectFenced };
  }

  /** Checks a settled produce and feeds the model. */
  settleProduce(sent: {
    t: Tracked<unknown>;
    requests: SentRequest[];
    expectFenced: boolean;
  }): void {
    const { t, requests, expectFenced } = sent;
    const label = requests.map((r) => `#${r.id}`).join(",");
    if (!t.settled) throw new SimViolation("settles", `produce ${label} never settled`);
    if (t.ok) {
      if (expectFenced)
        throw new SimViolation("fenced", `produce ${label} to a fenced partition was acknowledged`);
      const spans = (
        t.value as { spans: { partition: number; baseOffset: number; count: number }[] }
      ).spans;
      // Spans are runs in request order; per partition they must be consecutive offsets.
      const next = new Map<number, number>();
      for (const span of spans) {
        const request = requests.find((r) => r.partition === span.partition);
        if (request === undefined)
          throw new SimViolation(
            "request-shape",
            `produce ${label}: a span names partition ${span.partition}, which got no records`,
          );
        const expected = next.get(span.partition);
        if (expected !== undefined && expected !== span.baseOffset) {
          throw new SimViolation(
            "request-shape",
            `produce ${label}: records of partition ${span.partition} are not at consecutive offsets`,
          );
        }
        if (expected === undefined)
          this.model.ack(request, span.baseOffset, { durable: this.durableAcks });
        next.set(span.partition, span.baseOffset + span.count);
      }
      for (const r of requests) {
        if (next.get(r.partition) !== r.baseOffset + r.records.length) {
          throw new SimViolation(
            "request-shape",
            `produce ${label}: spans cover ${next.get(r.partition)! - r.baseOffset} records of partition ${r.partition}, sent ${r.records.length}`,
          );
        }
      }
      this.summary.acked++;
      this.trace(
        `  ack ${requests.map((r) => `#${r.id}@${r.partition}:${r.baseOffset}`).join(", ")}`,
      );
      return;
    }
    for (const r of requests) r.status = "failed";
    this.summary.failed++;
    this.trace(`  error ${label}: ${errorText(t.error)}`);
    if (this.fs.poweredOff) return; // the process is gone; any error will do
    if (!(t.error instanceof BrokerError) || !produceErrorCodes.has(t.error.kind.code)) {
      throw new SimViolation(
        "errors",
        `produce ${label} rejected with an error outside the table's storage rows: ${errorText(t.error)}`,
      );
    }
    if (expectFenced && t.error.kind.code !== "partition_fenced") {
      throw new SimViolation(
        "fenced",
        `produce ${label} to a fenced partition rejected with ${t.error.kind.code}, not partition_fenced`,
      );
    }
  }

  async produceOne(topic: string, partition: number): Promise<Tracked<unknown>> {
    const sent = await this.sendProduce(this.topics.get(topic)!, [partition], false);
    await drainMicrotasks();
    this.settleProduce(sent);
    return sent.t;
  }

  async stepProduce(): Promise<void> {
    const topics = this.availableTopics();
    if (topics.length === 0) return;
    const n = 1 + this.prng.int(4);
    const sent = [];
    const reads: Awaited<ReturnType<Simulation["startFetch"]>>[] = [];
    for (let i = 0; i < n; i++) {
      // Now and then a fetch races the writes, group commits and rolls of this step.
      if (this.prng.chance(0.25)) reads.push(await this.startFetch(topics));
      const topic = topics[this.prng.int(topics.length)];
      const records = 1 + this.prng.int(6);
      const multi = topic.partitions > 1 && this.prng.chance(0.2);
      const first = this.prng.int(topic.partitions);
      const targets = Array.from({ length: records }, () =>
        multi ? this.prng.int(topic.partitions) : first,
      );
      sent.push(await this.sendProduce(topic, targets, multi));
      const gap = this.prng.int(6);
      for (let g = 0; g < gap; g++) await Promise.resolve();
    }
    await drainMicrotasks();
    for (const r of reads) {
      if (r === null) continue;
      const { t, pm, request } = r;
      if (!t.settled)
        throw new SimViolation(
          "settles",
          `fetch ${pm.topic}/${pm.partition} at ${request.offset} never settled`,
        );
      if (!t.ok) {
        if (this.fs.poweredOff) continue;
        throw new SimViolation(
          "fetch",
          `fetch ${pm.topic}/${pm.partition} at ${request.offset}, racing appends, rejected: ${errorText(t.error)}`,
        );
      }
      this.checkFetch(pm, request, t.value!, "fetch racing appends");
    }
    for (const s of sent) this.settleProduce(s);
  }

  /** Starts a fetch at a random offset in [log start, high watermark] without waiting for it. */
  async startFetch(topics: TopicModel[]) {
    const topic = topics[this.prng.int(topics.length)];
    const partition = this.prng.int(topic.partitions);
    const pm = this.model.partition(topic.name, partition);
    const offsets = await this.broker!.listOffsets({ topic: topic.name, partition }).catch(
      () => null,
    );
    if (offsets === null) return null;
    const offset =
      offsets.logStartOffset + this.prng.int(offsets.highWatermark - offsets.logStartOffset + 1);
    const request = { offset, maxRecords: 1 + this.prng.int(40) };
    this.trace(
      `fetch ${topic.name}/${partition} offset ${offset} max_records ${request.maxRecords} (hw ${offsets.highWatermark}), racing appends`,
    );
    const t = track(this.broker!.fetch({ topic: topic.name, partition, ...request }));
    return { t, pm, request };
  }

  async stepFetch(): Promise<void> {
    const topics = this.availableTopics();
    if (topics.length === 0) return;
    const topic = topics[this.prng.int(topics.length)];
    const partition = this.prng.int(topic.partitions);
    const pm = this.model.partition(topic.name, partition);
    const broker = this.broker!;
    let offsets;
    try {
      offsets = await broker.listOffsets({ topic: topic.name, partition });
    } catch (err) {
      if (this.fs.poweredOff) return;
      throw new SimViolation(
        "fetch",
        `listOffsets ${topic.name}/${partition} rejected: ${errorText(err)}`,
      );
    }
    this.noteHighWatermark(pm, offsets.highWatermark, "listOffsets");
    const beyond = this.prng.chance(0.05);
    const span = offsets.highWatermark - offsets.logStartOffset;
    const offset = beyond
      ? offsets.highWatermark + 1 + this.prng.int(3)
      : offsets.logStartOffset + this.prng.int(span + 1);
    const maxRecords = 1 + this.prng.int(40);
    const maxBytes = this.prng.chance(0.3) ? 1 + this.prng.int(3000) : undefined;
    this.trace(
      `fetch ${topic.name}/${partition} offset ${offset} max_records ${maxRecords}${maxBytes ? ` max_bytes ${maxBytes}` : ""} (hw ${offsets.highWatermark})`,
    );
    let result;
    try {
      result = await broker.fetch({ topic: topic.name, partition, offset, maxRecords, maxBytes });
    } catch (err) {
      if (this.fs.poweredOff) return;
      if (beyond && err instanceof BrokerError && err.kind.code === "offset_out_of_range") return;
      throw new SimViolation(
        "fetch",
        `fetch ${topic.name}/${partition} at ${offset} rejected: ${errorText(err)}`,
      );
    }
    if (beyond)
      throw new SimViolation(
        "fetch",
        `fetch above the high watermark (${offset} > ${offsets.highWatermark}) did not reject`,
      );
    this.checkFetch(pm, { offset, maxRecords, maxBytes }, result, "fetch");
  }

  noteHighWatermark(pm: PartitionModel, hw: number, where: string): void {
    if (hw < pm.maxHighWatermark) {
      throw new SimViolation(
        "hw-monotonic",
        `${pm.topic}/${pm.partition} high watermark went back from ${pm.maxHighWatermark} to ${hw} (${where})`,
      );
    }
    pm.maxHighWatermark = hw;
  }

  /** Checks one fetch result and records what it served. @returns the records. */
  checkFetch(
    pm: PartitionModel,
    request: { offset: number; maxRecords: number; maxBytes?: number },
    result: {
      records: { bytes: Uint8Array; count: number };
      nextOffset: number;
      highWatermark: number;
    },
    where: string,
  ): { offset: number; id: number }[] {
    const records = decodeServed(this.model, pm, result.records.bytes, {
      count: result.records.count,
      where,
    });
    const at = `${pm.topic}/${pm.partition} ${where} at ${request.offset}`;
    this.noteHighWatermark(pm, result.highWatermark, where);
    let last = request.offset - 1;
    for (const r of records) {
      if (r.offset <= last)
        throw new SimViolation("order", `${at}: offset ${r.offset} does not increase past ${last}`);
      if (r.offset >= result.highWatermark)
        throw new SimViolation(
          "below-hw",
          `${at}: served offset ${r.offset} at or above the high watermark ${result.highWatermark}`,
        );
      last = r.offset;
    }
    if (records.length > request.maxRecords)
      throw new SimViolation(
        "fetch",
        `${at}: ${records.length} records for max_records ${request.maxRecords}`,
      );
    if (
      request.maxBytes !== undefined &&
      records.length > 1 &&
      result.records.bytes.length > request.maxBytes
    ) {
      throw new SimViolation(
        "fetch",
        `${at}: ${result.records.bytes.length} bytes for max_bytes ${request.maxBytes}`,
      );
    }
    if (records.length > 0 && result.nextOffset !== last + 1)
      throw new SimViolation(
        "fetch",
        `${at}: next offset ${result.nextOffset} after last record ${last}`,
      );
    if (result.nextOffset < request.offset)
      throw new SimViolation("fetch", `${at}: next offset ${result.nextOffset} goes back`);
    if (!pm.corruptReported) {
      if (request.offset < result.highWatermark && records.length === 0) {
        throw new SimViolation(
          "contiguous",
          `${at}: nothing served below the high watermark ${result.highWatermark}, and no corruption was reported`,
        );
      }
      if (records.length > 0 && records[0].offset !== request.offset) {
        throw new SimViolation(
          "contiguous",
          `${at}: first record served is ${records[0].offset}, and no corruption was reported`,
        );
      }
    }
    for (const r of records) this.model.observe(pm, r, { stable: true, where });
    return records;
  }

  stepAdvance(): void {
    const ms = 1 + this.prng.int(300);
    this.trace(`advance clock ${ms} ms`);
    this.clock.advance(ms);
    this.timeMs = this.clock.nowMs();
  }

  async stepCleanRestart(): Promise<void> {
    // A clean stop flushes: with flushEveryRecords > 1, what was acknowledged is durable now,
    // except on a partition fenced in this incarnation (its unsynced bytes are gone).
    if (this.mem.faults.armed > 0)
      this.trace(
        "disarm the faults that did not fire (faults during a start are drawn in recover)",
      );
    this.mem.faults.clear();
    await this.closeBroker("clean restart");
    this.summary.cleanRestarts++;
    const fenced = new Set(this.logger.named("partition.fenced").map((f) => f.partition));
    for (const pm of this.model.partitions.values()) {
      if (pm.fencedIn !== this.incarnation && !fenced.has(`${pm.topic}/${pm.partition}`)) {
        for (const [offset, id] of pm.ackedVolatile)
          this.model.observe(
            pm,
            { offset, id },
            { stable: true, where: "acknowledged before a clean stop" },
          );
      }
      pm.ackedVolatile.clear();
    }
    this.fs.cutPower();
    const alive = await this.openBroker();
    if (!alive) throw new SimViolation("recovery", "the disk died during a clean restart");
    await this.verifyAfterRecovery();
  }

  stepCrashNow(forceMode?: CrashMode): void {
    const mode = forceMode ?? this.crashMode();
    const seed = this.prng.nextU32();
    const report = this.fs.cutPower({ seed, mode })!;
    this.onCrash(report, `the next step (crash ${mode}, seed ${seed})`);
  }

  stepArmFault(): void {
    if (this.mem.faults.armed > 0) return;
    const p = this.prng;
    const topic = "sim";
    const part = p.int(this.partitionCount);
    const scoped = p.chance(0.5);
    const logPath = scoped ? new RegExp(`/topics/${topic}/${part}/\\d{20}\\.log$`) : /\.log$/;
    const indexPath = scoped ? new RegExp(`/topics/${topic}/${part}/\\d{20}\\.index$`) : /\.index$/;
    const kind = p.int(12);
    let what: string;
    switch (kind) {
      case 0: {
        const k = p.int(300);
        this.mem.faults.failNext({ op: "write", path: logPath, code: "ENOSPC", partialBytes: k });
        what = `ENOSPC after ${k} bytes on the next log write${scoped ? ` of ${topic}/${part}` : ""}`;
        break;
      }
      case 1:
        this.mem.faults.failNext({ op: "write", path: logPath, code: "EIO" });
        what = `EIO on the next log write${scoped ? ` of ${topic}/${part}` : ""}`;
        break;
      case 2: {
        const drop = p.chance(0.7);
        this.mem.faults.failNext({ op: "sync", path: logPath, code: "EIO", dropDirtyData: drop });
        what = `EIO on the next log fsync${scoped ? ` of ${topic}/${part}` : ""} (dirty data ${drop ? "dropped" : "kept"})`;
        break;
      }
      case 3: {
        const k = p.int(20);
        this.mem.faults.failNext({ op: "write", path: indexPath, code: "EIO", partialBytes: k });
        what = `EIO after ${k} bytes on the next index write`;
        break;
      }
      case 4:
        this.mem.faults.failNext({ op: "sync", path: indexPath, code: "EIO" });
        what = "EIO on the next index fsync";
        break;
      case 5: {
        const k = p.int(300);
        this.mem.faults.failNext({ op: "write", path: logPath, code: "ENOSPC", partialBytes: k });
        this.mem.faults.failNext({ op: "truncate", path: logPath, code: "EIO" });
        what = `ENOSPC after ${k} bytes on the next log write, and the cut fails too`;
        break;
      }
      case 11: {
        const k = p.int(300);
        this.mem.faults.failNext({ op: "write", path: logPath, code: "ENOSPC", partialBytes: k });
        this.mem.faults.failNext({ op: "sync", path: logPath, code: "EIO" });
        what = `ENOSPC after ${k} bytes on the next log write, and the fsync of the cut fails`;
        break;
      }
      case 6:
        this.mem.faults.failNext({ op: "create", code: "EIO" });
        what = "EIO on the next file create (a roll)";
        break;
      case 7:
        this.mem.faults.failNext({ op: "syncDir", code: "EIO" });
        what = "EIO on the next directory fsync";
        break;
      case 8:
        this.mem.faults.failNext({ op: "rename", code: "EIO" });
        what = "EIO on the next rename";
        break;
      case 9:
        this.mem.faults.failNext({ op: "truncate", code: "EIO" });
        what = "EIO on the next truncate";
        break;
      default: {
        const n = 1 + p.int(30);
        const enospc = p.chance(0.5);
        const k = p.int(100);
        this.mem.faults.failNth({
          n,
          code: enospc ? "ENOSPC" : "EIO",
          partialBytes: enospc ? k : 0,
        });
        what = `countdown: mutation ${n} from now fails with ${enospc ? `ENOSPC after ${k} bytes` : "EIO"}`;
      }
    }
    this.trace(`armed fault: ${what}`);
  }

  async stepCreateTopic(): Promise<void> {
    if (this.topics.size >= 3) return;
    await this.createTopic(`t${this.topics.size}`, 1 + this.prng.int(3));
  }

  /** Creates a topic; a failure must be storage_error. @returns true if it was acknowledged. */
  async createTopic(name: string, partitions: number): Promise<boolean> {
    this.topics.set(name, { name, partitions: 0, acked: false });
    this.trace(`create topic ${name} with ${partitions} partitions`);
    try {
      await this.broker!.createTopic({
        name,
        partitions,
        config: { segment_bytes: this.segmentBytes },
      });
    } catch (err) {
      this.trace(`  create topic ${name} failed: ${errorText(err)}`);
      if (this.fs.poweredOff) return false;
      if (!(err instanceof BrokerError) || err.kind.code !== "storage_error") {
        throw new SimViolation(
          "errors",
          `createTopic rejected with something other than storage_error: ${errorText(err)}`,
        );
      }
      return false;
    }
    this.topics.set(name, { name, partitions, acked: true });
    return true;
  }

  /**
   * Sends produce requests one after another without waiting, then checks them all once they
   * settled. Each entry: the partitions of its records (one partition, or several for a request
   * spanning partitions).
   */
  async produceConcurrently(topic: string, requests: number[][]): Promise<void> {
    const t = this.topics.get(topic);
    if (t === undefined || t.partitions === 0 || this.broker === null) return;
    const sent = [];
    for (const targets of requests)
      sent.push(await this.sendProduce(t, targets, new Set(targets).size > 1));
    await drainMicrotasks();
    for (const s of sent) this.settleProduce(s);
  }

  // ---------------------------------------------------------------- checks

  /**
   * Topics: every acknowledged topic is available; a topic that exists but was never
   * acknowledged may be available (then the model adopts it) or unavailable.
   */
  async checkTopicsAvailable(options: { faultDuringOpen: boolean }): Promise<void> {
    const broker = this.broker!;
    const listed = new Map((await broker.listTopics()).map((t) => [t.name, t]));
    for (const topic of this.topics.values()) {
      const got = listed.get(topic.name);
      if (topic.acked && got === undefined) {
        if (options.faultDuringOpen) continue;
        const why =
          broker.describeStorage().unavailable.find((u) => u.name === topic.name)?.reason ??
          "not listed";
        throw new SimViolation(
          "topics",
          `topic ${topic.name} was created (acknowledged) but is not available after a restart: ${why}`,
        );
      }
      if (got !== undefined && topic.acked && got.partitions.length !== topic.partitions) {
        throw new SimViolation(
          "topics",
          `topic ${topic.name} has ${got.partitions.length} partitions, created with ${topic.partitions}`,
        );
      }
      if (got !== undefined && !topic.acked && !options.faultDuringOpen) {
        // Created before a crash without its answer: adopt it.
        topic.partitions = got.partitions.length;
      }
      if (got === undefined && !topic.acked) topic.partitions = 0;
    }
    for (const name of listed.keys()) {
      if (!this.topics.has(name))
        throw new SimViolation("topics", `topic ${name} appeared without ever being created`);
    }
  }

  async verifyAfterRecovery(): Promise<void> {
    await this.checkTopicsAvailable({ faultDuringOpen: false });
    await this.verifyAll("after recovery", { disk: true });
  }

  /** Reads every partition of every available topic in full and checks it. */
  async verifyAll(why: string, options: { disk?: boolean } = {}): Promise<void> {
    this.trace(`verify all (${why})`);
    const listed = new Set((await this.broker!.listTopics()).map((t) => t.name));
    for (const topic of this.availableTopics()) {
      if (!listed.has(topic.name)) continue; // availability is checkTopicsAvailable's business
      for (let p = 0; p < topic.partitions; p++)
        await this.verifyPartition(this.model.partition(topic.name, p), options);
    }
  }

  async verifyPartition(pm: PartitionModel, options: { disk?: boolean }): Promise<void> {
    const broker = this.broker!;
    const name = `${pm.topic}/${pm.partition}`;
    let offsets;
    try {
      offsets = await broker.listOffsets({ topic: pm.topic, partition: pm.partition });
    } catch (err) {
      throw new SimViolation("fetch", `listOffsets ${name} rejected: ${errorText(err)}`);
    }
    this.noteHighWatermark(pm, offsets.highWatermark, "verify");
    const visible = new Map<number, number>();
    let offset = offsets.logStartOffset;
    for (let guard = 0; offset < offsets.highWatermark; guard++) {
      if (guard > 100_000) throw new SimViolation("fetch", `${name}: a full read does not end`);
      const maxRecords = 1 + this.prng.int(200);
      let result;
      try {
        result = await broker.fetch({
          topic: pm.topic,
          partition: pm.partition,
          offset,
          maxRecords,
        });
      } catch (err) {
        throw new SimViolation(
          "fetch",
          `${name}: fetch at ${offset} below the high watermark rejected: ${errorText(err)}`,
        );
      }
      const records = this.checkFetch(pm, { offset, maxRecords }, result, "full read");
      for (const r of records) visible.set(r.offset, r.id);
      if (result.nextOffset <= offset)
        throw new SimViolation(
          "fetch",
          `${name}: fetch at ${offset} does not move on (next offset ${result.nextOffset})`,
        );
      offset = result.nextOffset;
    }
    // durable / stable: everything served before or acknowledged with fsync is still there.
    for (const [o, id] of pm.stable) {
      if (o < offsets.logStartOffset) continue;
      const now = visible.get(o);
      if (now === undefined) {
        const r = this.model.records[id];
        throw new SimViolation(
          "durable",
          `${name}: offset ${o} held record #${id} (request #${r.requestId}, ${this.model.requests[r.requestId].status}) and is no longer readable (high watermark ${offsets.highWatermark})`,
        );
      }
    }
    // prefix: what survives of a request is a prefix of it.
    const byRequest = new Map<number, number[]>();
    for (const id of visible.values()) {
      const r = this.model.records[id];
      if (!byRequest.has(r.requestId)) byRequest.set(r.requestId, []);
      byRequest.get(r.requestId)!.push(r.index);
    }
    for (const [requestId, indexes] of byRequest) {
      indexes.sort((a, b) => a - b);
      const request = this.model.requests[requestId];
      if (indexes[indexes.length - 1] !== indexes.length - 1) {
        throw new SimViolation(
          "prefix",
          `${name}: request #${requestId} (${request.status}) survives as records ${indexes.join(",")} of ${request.records.length}, not a prefix`,
        );
      }
      if (
        request.status === "acked" &&
        this.durableAcks &&
        indexes.length !== request.records.length
      ) {
        throw new SimViolation(
          "durable",
          `${name}: acknowledged request #${requestId} survives as ${indexes.length} of ${request.records.length} records`,
        );
      }
    }
    if (!pm.corruptReported && visible.size !== offsets.highWatermark - offsets.logStartOffset) {
      throw new SimViolation(
        "contiguous",
        `${name}: ${visible.size} records below the high watermark ${offsets.highWatermark}, and no corruption was reported`,
      );
    }
    if (options.disk) {
      const max = maxValidOffsetOnDisk(
        this.model,
        pm,
        this.mem,
        `${dataDir}/topics/${pm.topic}/${pm.partition}`,
      );
      if (max >= offsets.highWatermark) {
        throw new SimViolation(
          "next-offset",
          `${name}: a valid record with offset ${max} is on disk, but the next offset after recovery is ${offsets.highWatermark}`,
        );
      }
    }
  }
}

function randomBytes(prng: Prng, length: number): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) out[i] = prng.int(256);
  return out;
}
