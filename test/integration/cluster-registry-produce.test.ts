/**
 * Produce-time validation on a broker whose registry is the cluster's (src/cluster/
 * cluster-registry.ts, docs/cluster.md "Schema registry and API keys in etcd"): a record naming
 * a schema registered a moment ago through another broker is accepted although this broker's
 * watch has not brought it yet (the refusal is checked again after one etcd read), and records
 * that are still invalid after that read are refused, appending nothing. On an in-memory etcd
 * (test/helpers/fake-etcd.ts) whose watches are held.
 */
import avsc from "avsc";
import { describe, expect, it, onTestFinished } from "vitest";
import { BrokerError, Errors } from "../../src/broker/errors.ts";
import { ClusterRegistryStore } from "../../src/cluster/cluster-registry.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";

const schema = { type: "record", name: "Order", fields: [{ name: "id", type: "int" }] };

function wire(id: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(1, id);
  out.set(payload, 5);
  return out;
}

async function clusterRegistry(etcd: FakeEtcd, token: string) {
  let n = 0;
  const opened = await ClusterRegistryStore.open({
    etcd,
    prefix: "/es-broker",
    clock: systemClock,
    logger: silentLogger,
    randomToken: () => `${token}${++n}`,
  });
  onTestFinished(() => opened.store.close());
  return opened;
}

describe("produce-time validation against the cluster's registry", () => {
  it("accepts a schema registered through another broker before this broker's watch brings it", async () => {
    const etcd = new FakeEtcd();
    const here = await clusterRegistry(etcd, "a");
    const elsewhere = await clusterRegistry(etcd, "b");
    const { broker } = await openTestBroker();
    await broker.useRegistry(here.registry);
    await broker.createTopic({
      name: "orders",
      partitions: 1,
      config: { value_schema_subject: "orders-value" },
    });
    etcd.holdWatches();
    const { id } = await elsewhere.registry.register("orders-value", {
      schema: JSON.stringify(schema),
    });
    expect(here.registry.state.schemas.has(id)).toBe(false);
    const type = avsc.Type.forSchema(schema as avsc.Schema);
    const good = new EntryBatchBuilder().add(null, wire(id, type.toBuffer({ id: 7 }))).build();
    const result = await broker.produce({ topic: "orders", partition: 0, batch: good });
    expect(result.spans[0].count).toBe(1);
    expect(here.registry.state.schemas.has(id)).toBe(true);

    // Still invalid after the read: refused, nothing appended.
    const bad = new EntryBatchBuilder()
      .add(null, wire(id, type.toBuffer({ id: 8 })))
      .add(null, wire(id + 41, utf8("x")))
      .build();
    const refused = await broker
      .produce({ topic: "orders", partition: 0, batch: bad })
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(BrokerError);
    expect((refused as BrokerError).kind).toBe(Errors.invalidRecord);
    expect((refused as BrokerError).message).toMatch(/record 1 value .* does not exist/);
    const offsets = await broker.listOffsets({ topic: "orders", partition: 0 });
    expect(offsets.highWatermark).toBe(1);
  });
});
