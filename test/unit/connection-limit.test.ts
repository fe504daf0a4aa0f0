import { describe, expect, it } from "vitest";
import { ConnectionLimit } from "../../src/lib/connection-limit.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { RefusalLog } from "../../src/lib/refusals.ts";

describe("ConnectionLimit (--max-connections)", () => {
  it("admits up to the bound, refuses beyond it (counted, logged at most once per interval) and admits again after a release", () => {
    const logger = new MemoryLogger();
    const clock = new ManualClock();
    const refusals = new RefusalLog({ logger, clock, intervalMs: 1000 });
    const limit = new ConnectionLimit(2, refusals);
    expect(limit.admit("http", "a:1")).toBe(true);
    expect(limit.admit("tcp", "a:2")).toBe(true);
    expect(limit.open).toBe(2);
    expect(limit.admit("kafka", "a:3")).toBe(false);
    expect(limit.admit("http", "a:4")).toBe(false);
    expect(limit.open).toBe(2);
    expect(refusals.counts()["connection.refused"]).toBe(2);
    expect(logger.named("connection.refused")).toMatchObject([
      { listener: "kafka", remote: "a:3", max_connections: 2, refused: 1 },
    ]);
    clock.advance(1000);
    expect(logger.named("connection.refused")).toHaveLength(2);
    expect(logger.named("connection.refused")[1]).toMatchObject({ remote: "a:4", refused: 1 });
    limit.release();
    expect(limit.admit("http", "a:5")).toBe(true);
    expect(limit.open).toBe(2);
  });

  it("refuses a bound that is not a positive integer", () => {
    expect(() => new ConnectionLimit(0)).toThrow(RangeError);
    expect(() => new ConnectionLimit(1.5)).toThrow(RangeError);
  });
});
