/**
 * LocalBroker.initProducerId (docs/kafka.md "Idempotent producers"): ids are the clock slot
 * × 1024 plus the node id modulo 1024, so the brokers of a cluster, each checking only its own
 * producer state, never hand out the same id (attack13 F3).
 */
import { afterEach, describe, expect, it } from "vitest";
import { LocalBroker } from "../../src/broker/broker.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import type { Clock } from "../../src/lib/clock.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import { systemClock } from "../../src/runtime/clock.ts";

/** The system clock, its time frozen: every broker reads the same millisecond. */
const frozen: Clock = { ...systemClock, nowMs: () => 1_800_000_000_000 };

describe("Kafka producer ids", () => {
  const open: LocalBroker[] = [];
  afterEach(async () => {
    for (const b of open.splice(0)) await b.close();
  });

  async function broker(nodeId?: number): Promise<LocalBroker> {
    const b = await LocalBroker.open({
      fs: new MemoryFileSystem(),
      dataDir: "/data",
      clock: frozen,
      logger: silentLogger,
      ...(nodeId === undefined ? {} : { nodeId }),
    });
    open.push(b);
    return b;
  }

  it("brokers of one cluster never hand out the same id, even in the same millisecond", async () => {
    const brokers = await Promise.all([1, 2, 3].map((id) => broker(id)));
    const ids = new Set<number>();
    for (let round = 0; round < 200; round++)
      for (const b of brokers) {
        const { producerId, epoch } = await b.initProducerId();
        expect(epoch).toBe(0);
        expect(ids.has(producerId), `id ${producerId} handed out twice`).toBe(false);
        ids.add(producerId);
      }
    expect(ids.size).toBe(600);
  });

  it("an id is the clock slot times 1024 plus the node id modulo 1024, strictly increasing", async () => {
    const b = await broker(1027);
    const first = await b.initProducerId();
    const second = await b.initProducerId();
    expect(first.producerId % 1024).toBe(3);
    expect(Math.floor(first.producerId / 1024)).toBe(1_800_000_000_000);
    expect(second.producerId).toBe(first.producerId + 1024);
    expect(Number.isSafeInteger(second.producerId)).toBe(true);
    const alone = await broker();
    expect((await alone.initProducerId()).producerId % 1024).toBe(0);
  });
});
