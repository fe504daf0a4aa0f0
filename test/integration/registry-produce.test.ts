/**
 * Produce-time validation over both front doors (docs/registry.md "Produce-time validation";
 * field failure 35): a topic whose values must match subject `t-value` (Avro v1, then v2). Every
 * invalid record is refused with `invalid_record` (HTTP 422; TCP error 30) naming the record, the
 * schema id and version, and the path; a request with one bad record appends none; valid ones
 * are appended; with the registry unreadable, produces fail closed.
 */
import avsc from "avsc";
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import type { LocalBroker } from "../../src/broker/broker.ts";
import { ClientError } from "../../src/client/client.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { openTestBroker } from "../helpers/broker.ts";
import { serveTcp } from "../helpers/front-doors.ts";

interface Refusal {
  status: number | undefined;
  code: string;
  message: string;
  details?: Record<string, unknown>;
}

interface Door {
  name: string;
  /** Produces values (and keys) to `topic`: null on success, else the refusal. */
  produce(
    topic: string,
    records: { key?: Uint8Array | null; value: Uint8Array }[],
  ): Promise<Refusal | null>;
}

const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");

const doors: { name: string; open: (broker: LocalBroker) => Promise<Door> }[] = [
  {
    name: "HTTP",
    async open(broker) {
      const app = createHttpApp({ broker, logger: new MemoryLogger(), registry: broker.registry });
      return {
        name: "HTTP",
        async produce(topic, records) {
          const body = {
            records: records.map((r) => ({
              value_b64: b64(r.value),
              ...(r.key === undefined || r.key === null ? {} : { key_b64: b64(r.key) }),
            })),
          };
          const res = await app.request(`/v1/topics/${topic}/records`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(body),
          });
          if (res.status === 200) return null;
          const { error } = (await res.json()) as {
            error: { code: string; message: string; details?: Record<string, unknown> };
          };
          return { status: res.status, ...error };
        },
      };
    },
  },
  {
    name: "TCP",
    async open(broker) {
      const client = await (await serveTcp(broker)).connect();
      return {
        name: "TCP",
        async produce(topic, records) {
          try {
            await client.produce(topic, records);
            return null;
          } catch (err) {
            if (!(err instanceof ClientError)) throw err;
            expect(err.tcp).toBe(
              Errors[err.code === "invalid_record" ? "invalidRecord" : "unavailable"].tcp,
            );
            return {
              status: undefined,
              code: err.code,
              message: err.message,
              details: err.details,
            };
          }
        },
      };
    },
  },
];

const v1 = { type: "record", name: "Order", fields: [{ name: "id", type: "long" }] };
const v2 = {
  type: "record",
  name: "Order",
  fields: [
    { name: "id", type: "long" },
    { name: "note", type: "string", default: "" },
  ],
};
const other = { type: "record", name: "Other", fields: [{ name: "x", type: "int" }] };

/** The Confluent wire format: magic 0, the id (u32 big-endian), the payload. */
function wire(id: number, payload: Uint8Array): Uint8Array {
  const out = new Uint8Array(5 + payload.length);
  new DataView(out.buffer).setUint32(1, id);
  out.set(payload, 5);
  return out;
}

async function setup(door: (typeof doors)[number]) {
  const { broker } = await openTestBroker();
  const registry = broker.registry;
  const id1 = (await registry.register("t-value", { schema: JSON.stringify(v1) })).id;
  const id2 = (await registry.register("t-value", { schema: JSON.stringify(v2) })).id;
  const otherId = (await registry.register("other-value", { schema: JSON.stringify(other) })).id;
  const oldId = (await registry.register("old-value", { schema: '"string"' })).id;
  await registry.setCompatibility("t-value", "NONE");
  const deletedId = (await registry.register("t-value", { schema: '"boolean"' })).id;
  await registry.deleteVersion("t-value", "3");
  await broker.createTopic({
    name: "t",
    partitions: 1,
    config: { value_schema_subject: "t-value" },
  });
  await registry.register("j-value", {
    schemaType: "JSON",
    schema: JSON.stringify({
      type: "object",
      properties: { id: { type: "integer" } },
      required: ["id"],
      additionalProperties: false,
    }),
  });
  await broker.createTopic({
    name: "j",
    partitions: 1,
    config: { value_schema_subject: "j-value", schema_format: "json" },
  });
  await broker.createTopic({
    name: "k",
    partitions: 1,
    config: { key_schema_subject: "other-value", value_schema_subject: "t-value" },
  });
  const t1 = avsc.Type.forSchema(v1 as avsc.Schema);
  const t2 = avsc.Type.forSchema(v2 as avsc.Schema);
  const valid1 = wire(id1, t1.toBuffer({ id: 7 }));
  const valid2 = wire(id2, t2.toBuffer({ id: 8, note: "hi" }));
  return {
    broker,
    d: await door.open(broker),
    id1,
    id2,
    otherId,
    oldId,
    deletedId,
    t1,
    t2,
    valid1,
    valid2,
  };
}

for (const door of doors) {
  describe(`produce-time validation over ${door.name}`, () => {
    it("accepts valid v1 and v2 records and refuses each invalid one, naming the record, schema id, version and path", async () => {
      const s = await setup(door);
      expect(await s.d.produce("t", [{ value: s.valid1 }, { value: s.valid2 }])).toBeNull();
      const otherValue = wire(
        s.otherId,
        avsc.Type.forSchema(other as avsc.Schema).toBuffer({ x: 1 }),
      );
      const cases: [string, Uint8Array, RegExp, Record<string, unknown>][] = [
        [
          "another subject's id",
          otherValue,
          /schema id 3 is not a version of subject "t-value"/,
          { schema_id: s.otherId, version: null },
        ],
        [
          "an id that does not exist",
          wire(99, new Uint8Array([14])),
          /schema id 99 does not exist/,
          { schema_id: 99, version: null },
        ],
        [
          "a soft-deleted version's id",
          wire(s.deletedId, new Uint8Array([1])),
          /soft-deleted/,
          { schema_id: s.deletedId, version: 3 },
        ],
        [
          "magic byte 1",
          Uint8Array.of(1, ...s.valid1.subarray(1)),
          /magic byte 1/,
          { schema_id: null },
        ],
        [
          "a 3-byte value",
          s.valid1.subarray(0, 3),
          /3 bytes, shorter than the 5-byte wire header/,
          { schema_id: null },
        ],
        [
          "an id cut short at 2 bytes",
          Uint8Array.of(0, 0, 0),
          /shorter than the 5-byte wire header/,
          { schema_id: null },
        ],
        [
          "bytes that do not decode",
          wire(s.id2, Uint8Array.of(14, 40, 65)),
          /ends inside/,
          { schema_id: s.id2, version: 2, path: "/note" },
        ],
        [
          "bytes left over",
          wire(s.id1, Uint8Array.of(14, 1, 2)),
          /\(schema id \d+, version 1\) \(the whole value\): .*left over/,
          { schema_id: s.id1, version: 1, path: "" },
        ],
      ];
      for (const [what, value, message, details] of cases) {
        const refusal = await s.d.produce("t", [{ value: s.valid1 }, { value }]);
        expect(refusal, what).not.toBeNull();
        expect(refusal!.code, what).toBe("invalid_record");
        if (door.name === "HTTP") expect(refusal!.status, what).toBe(422);
        expect(refusal!.message, what).toMatch(message);
        expect(refusal!.message, what).toMatch(/record 1 value/);
        expect(refusal!.details, what).toMatchObject({
          record_index: 1,
          part: "value",
          subject: "t-value",
          ...details,
        });
      }
      const { highWatermark } = await s.broker.listOffsets({ topic: "t", partition: 0 });
      expect(highWatermark).toBe(2);
    });

    it("appends nothing from a request of 10 records whose record 7 is invalid", async () => {
      const s = await setup(door);
      const records = Array.from({ length: 10 }, (_, i) => ({
        value: i === 7 ? wire(s.id1, Uint8Array.of(0x80)) : wire(s.id1, s.t1.toBuffer({ id: i })),
      }));
      const refusal = await s.d.produce("t", records);
      expect(refusal?.details).toMatchObject({
        record_index: 7,
        schema_id: s.id1,
        version: 1,
        path: "/id",
      });
      expect((await s.broker.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(0);
      records[7] = { value: s.valid2 };
      expect(await s.d.produce("t", records)).toBeNull();
      expect((await s.broker.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(10);
    });

    it("validates plain JSON against the latest version and names the failing path", async () => {
      const s = await setup(door);
      expect(await s.d.produce("j", [{ value: utf8('{"id":1}') }])).toBeNull();
      const extra = await s.d.produce("j", [{ value: utf8('{"id":1,"extra":true}') }]);
      expect(extra?.code).toBe("invalid_record");
      expect(extra?.message).toMatch(/must NOT have additional properties \("extra"\)/);
      expect(extra?.details).toMatchObject({ record_index: 0, version: 1, path: "" });
      const wrongType = await s.d.produce("j", [{ value: utf8('{"id":"one"}') }]);
      expect(wrongType?.details).toMatchObject({ path: "/id" });
      const notJson = await s.d.produce("j", [{ value: utf8("{id") }]);
      expect(notJson?.message).toMatch(/not JSON text/);
    });

    it("a topic may name a subject with no version yet: its produces are refused saying to register one, then pass", async () => {
      const s = await setup(door);
      await s.broker.createTopic({
        name: "n",
        partitions: 1,
        config: { value_schema_subject: "nosuch-value" },
      });
      const refused = await s.d.produce("n", [{ value: s.valid1 }]);
      expect(refused?.code).toBe("invalid_record");
      expect(refused?.message).toContain(
        'subject "nosuch-value" has no live version: register one (POST /registry/subjects/nosuch-value/versions) before producing',
      );
      const id = (await s.broker.registry.register("nosuch-value", { schema: JSON.stringify(v1) }))
        .id;
      expect(await s.d.produce("n", [{ value: wire(id, s.t1.toBuffer({ id: 1 })) }])).toBeNull();
    });

    it("checks keys against the key subject; a record without a key and a tombstone pass", async () => {
      const s = await setup(door);
      const key = wire(s.otherId, avsc.Type.forSchema(other as avsc.Schema).toBuffer({ x: 5 }));
      expect(
        await s.d.produce("k", [
          { key, value: s.valid1 },
          { key: null, value: s.valid1 },
        ]),
      ).toBeNull();
      expect(await s.d.produce("k", [{ key, value: new Uint8Array(0) }])).toBeNull();
      const bad = await s.d.produce("k", [{ key: s.valid1, value: s.valid1 }]);
      expect(bad?.details).toMatchObject({
        record_index: 0,
        part: "key",
        subject: "other-value",
        schema_id: s.id1,
      });
      expect(bad?.message).toMatch(/record 0 key/);
    });
  });
}

describe("an unreadable schemas.json", () => {
  it("makes produces to topics with a subject fail closed, and leaves other topics working", async () => {
    const fs = new MemoryFileSystem();
    const first = await openTestBroker({ fs });
    await first.broker.createTopic({
      name: "t",
      partitions: 1,
      config: { value_schema_subject: "t-value" },
    });
    await first.broker.createTopic({ name: "plain", partitions: 1 });
    await first.broker.close();
    fs.writeFileSync("/data/schemas.json", utf8("{not json"));
    const { broker, logger } = await openTestBroker({ fs });
    expect(logger.named("registry.unavailable")).toHaveLength(1);
    for (const door of doors) {
      const d = await door.open(broker);
      const refusal = await d.produce("t", [{ value: wire(1, Uint8Array.of(2)) }]);
      expect(refusal?.code, door.name).toBe("unavailable");
      expect(refusal?.message, door.name).toMatch(/schemas\.json/);
      expect(await d.produce("plain", [{ value: utf8("x") }]), door.name).toBeNull();
    }
    expect((await broker.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(0);
  });
});
