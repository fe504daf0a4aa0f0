/**
 * The seeded fault schedule of the Jepsen-style run (issue #16): which faults happen, when, and for
 * how long, drawn from one seed with our {@link Prng}, so a failing run replays its faults from the
 * seed it printed (`ES_BROKER_JEPSEN_SEED=<seed>`).
 *
 * Every schedule holds each of the five faults the issue names at least once, in a seeded order,
 * one at a time (a fault heals before the next begins, and the cluster gets a quiet gap to recover):
 *
 * | fault | what the harness does | heals by |
 * | --- | --- | --- |
 * | `kill-leader` | SIGKILL the broker leading a partition, for longer than the membership lease and the controller's grace | starting it again after `durationMs` |
 * | `kill-follower` | SIGKILL a broker that follows a partition (and leads none of the watched ones, when possible) | starting it again |
 * | `kill-etcd` | SIGKILL one etcd member | starting it again |
 * | `pause-leader` | SIGSTOP the broker leading a partition for longer than the membership lease and the controller's grace | SIGCONT |
 * | `restart-all` | SIGKILL every broker at once | starting them all again after `durationMs` |
 *
 * Who "the leader" is depends on the run, so a fault carries `pick`, a seeded number the harness
 * turns into a choice among the candidates it finds at that moment (`pick % candidates.length`).
 */
import { Prng } from "../../src/lib/prng.ts";

/** The faults of the issue. */
export const faultKinds = [
  "kill-leader",
  "kill-follower",
  "kill-etcd",
  "pause-leader",
  "restart-all",
] as const;

/** One of {@link faultKinds}. */
export type FaultKind = (typeof faultKinds)[number];

/** One scheduled fault. */
export interface Fault {
  kind: FaultKind;
  /** When it starts, in ms after the workload starts. */
  atMs: number;
  /** How long until it heals (restart, SIGCONT), in ms. */
  durationMs: number;
  /** A seeded choice among the candidates at run time (which leader, which follower, which member). */
  pick: number;
}

/** A run's faults and the seed they came from. */
export interface Schedule {
  seed: number;
  faults: Fault[];
  /** When the last fault has healed, in ms after the workload starts. */
  endMs: number;
}

/** Options of {@link makeSchedule}. */
export interface ScheduleOptions {
  seed: number;
  /**
   * The membership lease TTL of the brokers, in ms (default 6000, docs/cluster.md): a paused
   * leader stays stopped longer than this, so etcd drops its lease and a new leader is chosen.
   */
  leaseTtlMs?: number;
  /**
   * The controller's grace for a vanished registration, in ms (default 3000, docs/cluster.md
   * "Riding out a lost lease"): a leader paused for less than the lease and this comes back as
   * the leader it was, so a paused leader stays stopped longer than both.
   */
  lapseGraceMs?: number;
  /** Quiet time before the first fault and after each heal, in ms: [min, max] (default [2000, 4000]). */
  gapMs?: [number, number];
  /** How long a killed process stays down, in ms: [min, max] (default [1000, 4000]). */
  downMs?: [number, number];
  /**
   * Extra faults beyond one of each kind (default 0). `scripts/jepsen.mjs` adds them to fill a
   * longer run.
   */
  extraFaults?: number;
  /** Add seeded faults (after `extraFaults`) until the schedule lasts at least this long, in ms. */
  minDurationMs?: number;
}

function between(prng: Prng, [min, max]: [number, number]): number {
  return min + prng.int(max - min + 1);
}

/**
 * The schedule for a seed: every kind once in a seeded order, then `extraFaults` more of seeded
 * kinds, then more until it lasts `minDurationMs`, each after a seeded gap. Equal options give equal schedules on every runtime.
 * @throws AssertionError (from Prng) if the seed is not a safe integer.
 */
export function makeSchedule(options: ScheduleOptions): Schedule {
  const prng = new Prng(options.seed);
  const leaseTtlMs = options.leaseTtlMs ?? 6000;
  const lapseGraceMs = options.lapseGraceMs ?? 3000;
  const gapMs = options.gapMs ?? [2000, 4000];
  const downMs = options.downMs ?? [1000, 4000];
  const kinds: FaultKind[] = [...faultKinds];
  for (let i = kinds.length - 1; i > 0; i--) {
    const j = prng.int(i + 1);
    [kinds[i], kinds[j]] = [kinds[j], kinds[i]];
  }
  for (let i = 0; i < (options.extraFaults ?? 0); i++)
    kinds.push(faultKinds[prng.int(faultKinds.length)]);
  const faults: Fault[] = [];
  let t = 0;
  for (let i = 0; i < kinds.length || t < (options.minDurationMs ?? 0); i++) {
    const kind = i < kinds.length ? kinds[i] : faultKinds[prng.int(faultKinds.length)];
    t += between(prng, gapMs);
    // A paused or killed leader stays away past its lease and the controller's grace, so that
    // another broker takes over (a paused one back sooner keeps its place: no failover to measure).
    const durationMs =
      kind === "pause-leader" || kind === "kill-leader"
        ? leaseTtlMs + lapseGraceMs + between(prng, [1000, 3000])
        : between(prng, downMs);
    faults.push({ kind, atMs: t, durationMs, pick: prng.nextU32() });
    t += durationMs;
  }
  return { seed: options.seed, faults, endMs: t };
}

/** The schedule as lines for a test's output: the seed, how to replay it, every fault. */
export function describeSchedule(schedule: Schedule, replay: string): string {
  return [
    `jepsen: seed=${schedule.seed} (replay: ES_BROKER_JEPSEN_SEED=${schedule.seed} ${replay})`,
    ...schedule.faults.map(
      (f) =>
        `  at ${(f.atMs / 1000).toFixed(1)} s: ${f.kind} for ${(f.durationMs / 1000).toFixed(1)} s (pick ${f.pick})`,
    ),
  ].join("\n");
}

/**
 * The seed of this run: `ES_BROKER_JEPSEN_SEED` when set (a replay), else a fresh one.
 * @throws Error naming the variable if it is set but not a non-negative safe integer.
 */
export function seedFromEnv(env: Record<string, string | undefined> = process.env): number {
  const raw = env.ES_BROKER_JEPSEN_SEED;
  if (raw === undefined || raw === "") return Math.floor(Math.random() * 2 ** 32);
  const seed = Number(raw);
  if (!/^\d+$/.test(raw.trim()) || !Number.isSafeInteger(seed)) {
    throw new Error(
      `ES_BROKER_JEPSEN_SEED must be a non-negative integer (the seed a run printed), got "${raw}"`,
    );
  }
  return seed;
}
