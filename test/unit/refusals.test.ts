import { describe, expect, it } from "vitest";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { RefusalLog } from "../../src/lib/refusals.ts";

function setup(intervalMs = 5_000) {
  const clock = new ManualClock();
  const logger = new MemoryLogger();
  return { clock, logger, refusals: new RefusalLog({ logger, clock, intervalMs }) };
}

describe("RefusalLog", () => {
  it("logs the first refusal of a kind at once, with its fields", () => {
    const { logger, refusals } = setup();
    refusals.refuse("tcp.frame_refused", { remote: "1.2.3.4:5", length: 99 });
    expect(logger.events).toEqual([
      {
        level: "warn",
        event: "tcp.frame_refused",
        fields: { remote: "1.2.3.4:5", length: 99, refused: 1, refused_total: 1 },
      },
    ]);
  });

  it("sums a storm of refusals into one line per interval, losing none of them", () => {
    const { clock, logger, refusals } = setup(5_000);
    for (let i = 0; i < 1000; i++) {
      refusals.refuse("tcp.frame_refused", { remote: `10.0.0.1:${i}` });
      clock.advance(10); // 10 s of refusals, one every 10 ms
    }
    const lines = logger.named("tcp.frame_refused");
    // 0 s (the first), then 5 s and 10 s (summaries).
    expect(lines.length).toBe(3);
    expect(lines.map((l) => l.refused)).toEqual([1, 499, 500]);
    expect(lines.at(-1)).toMatchObject({ remote: "10.0.0.1:999", refused_total: 1000 });
    expect(refusals.counts()["tcp.frame_refused"]).toBe(1000);
  });

  it("limits each kind on its own", () => {
    const { logger, refusals } = setup();
    for (let i = 0; i < 10; i++) {
      refusals.refuse("tcp.frame_refused");
      refusals.refuse("tcp.read_timeout");
      refusals.refuse("http.parse_error");
    }
    expect(logger.events.map((e) => e.event)).toEqual([
      "tcp.frame_refused",
      "tcp.read_timeout",
      "http.parse_error",
    ]);
    expect(refusals.counts()).toMatchObject({
      "tcp.frame_refused": 10,
      "tcp.read_timeout": 10,
      "http.parse_error": 10,
      "auth.failed": 0,
      "kafka.request_refused": 0,
      "kafka.read_timeout": 0,
      "kafka.produce_refused": 0,
      "kafka.group_refused": 0,
    });
  });

  it("logs a lone refusal after a quiet interval at once again", () => {
    const { clock, logger, refusals } = setup(5_000);
    refusals.refuse("http.parse_error");
    clock.advance(60_000);
    refusals.refuse("http.parse_error");
    expect(logger.named("http.parse_error").map((l) => l.refused)).toEqual([1, 1]);
  });

  it("flush() writes what is pending and cancels the timers", () => {
    const { clock, logger, refusals } = setup(5_000);
    refusals.refuse("tcp.read_timeout");
    refusals.refuse("tcp.read_timeout");
    refusals.refuse("tcp.read_timeout");
    refusals.flush();
    expect(logger.named("tcp.read_timeout").map((l) => l.refused)).toEqual([1, 2]);
    clock.advance(10_000);
    expect(logger.named("tcp.read_timeout")).toHaveLength(2);
  });

  it("counts every kind from zero", () => {
    expect(setup().refusals.counts()).toEqual({
      "tcp.frame_refused": 0,
      "tcp.read_timeout": 0,
      "http.parse_error": 0,
      "auth.failed": 0,
      "tls.plaintext_client": 0,
      "tls.handshake_failed": 0,
      "http.tls_on_plain_port": 0,
      "kafka.request_refused": 0,
      "kafka.read_timeout": 0,
      "connection.refused": 0,
      "kafka.produce_refused": 0,
      "kafka.group_refused": 0,
    });
  });

  it("writes one line per interval when the event loop is late: a line written at once cancels the armed timer", () => {
    // `now` runs ahead of the timers (a loop busy under a flood): the timer armed by a refusal
    // is overdue but has not fired when the next refusal finds the last line 5 s old.
    const manual = new ManualClock();
    const base = manual.nowMs();
    let now = base;
    const clock = {
      nowMs: () => now,
      setTimer: (delayMs: number, fn: () => void) => manual.setTimer(delayMs, fn),
      afterIo: (fn: () => void) => manual.afterIo(fn),
      waitForIo: (maxMs: number, fn: () => void) => manual.waitForIo(maxMs, fn),
    };
    const logger = new MemoryLogger();
    const refusals = new RefusalLog({ logger, clock, intervalMs: 5_000 });
    refusals.refuse("auth.failed"); // line 1, at once
    manual.advance(1_000);
    now = base + 1_000;
    refusals.refuse("auth.failed"); // counted; a timer armed for base + 5 000
    now = base + 5_300; // the timer is overdue, not yet run
    refusals.refuse("auth.failed"); // line 2, at once (the last line is 5.3 s old)
    now = base + 5_350;
    refusals.refuse("auth.failed"); // counted
    manual.advance(4_400); // the loop catches up: the old timer's time has passed
    expect(logger.named("auth.failed").map((l) => l.refused)).toEqual([1, 2]);
    now = base + 10_400;
    manual.advance(10_000);
    const lines = logger.named("auth.failed");
    expect(lines.map((l) => l.refused)).toEqual([1, 2, 1]);
    expect(lines.at(-1)).toMatchObject({ refused_total: 4 });
  });
});
