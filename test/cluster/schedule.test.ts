/** test/cluster/schedule.ts: seeded, replayable fault schedules holding every fault of the issue. */
import { describe, expect, it } from "vitest";
import { describeSchedule, faultKinds, makeSchedule, seedFromEnv } from "./schedule.ts";

describe("fault schedule", () => {
  it("the same seed gives the same schedule; another seed another", () => {
    expect(makeSchedule({ seed: 42 })).toEqual(makeSchedule({ seed: 42 }));
    expect(makeSchedule({ seed: 42 }).faults).not.toEqual(makeSchedule({ seed: 43 }).faults);
  });

  it("holds every fault kind, one at a time, a paused or killed leader away past its lease and the grace", () => {
    for (let seed = 0; seed < 200; seed++) {
      const s = makeSchedule({ seed, leaseTtlMs: 6000, extraFaults: seed % 4 });
      expect(new Set(s.faults.map((f) => f.kind))).toEqual(new Set(faultKinds));
      expect(s.faults).toHaveLength(faultKinds.length + (seed % 4));
      let healed = 0;
      for (const f of s.faults) {
        expect(f.atMs - healed).toBeGreaterThanOrEqual(2000); // a quiet gap after each heal
        const pastLease = f.kind === "pause-leader" || f.kind === "kill-leader";
        expect(f.durationMs).toBeGreaterThanOrEqual(pastLease ? 6000 + 3000 + 1000 : 1000);
        healed = f.atMs + f.durationMs;
      }
      expect(s.endMs).toBe(healed);
    }
  });

  it("grows to a minimum duration with more seeded faults", () => {
    const s = makeSchedule({ seed: 3, minDurationMs: 120_000 });
    expect(s.endMs).toBeGreaterThanOrEqual(120_000);
    expect(s.faults.length).toBeGreaterThan(faultKinds.length);
    expect(makeSchedule({ seed: 3, minDurationMs: 120_000 })).toEqual(s);
  });

  it("prints the seed and how to replay it", () => {
    const text = describeSchedule(makeSchedule({ seed: 7 }), "npm test");
    expect(text).toMatch(/^jepsen: seed=7 \(replay: ES_BROKER_JEPSEN_SEED=7 npm test\)\n {2}at /);
    expect(text.split("\n")).toHaveLength(1 + faultKinds.length);
  });

  it("reads the seed from ES_BROKER_JEPSEN_SEED, refusing what is not one", () => {
    expect(seedFromEnv({ ES_BROKER_JEPSEN_SEED: "123" })).toBe(123);
    const fresh = seedFromEnv({});
    expect(Number.isSafeInteger(fresh) && fresh >= 0).toBe(true);
    for (const bad of ["-1", "1.5", "abc", "99999999999999999999"]) {
      expect(() => seedFromEnv({ ES_BROKER_JEPSEN_SEED: bad })).toThrow(
        /ES_BROKER_JEPSEN_SEED must be a non-negative integer \(the seed a run printed\), got/,
      );
    }
  });
});
