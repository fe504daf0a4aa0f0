/**
 * The schema registry's semantics (docs/registry.md; field failures 32, 33): schema identity and
 * ids, versions across deletes, compatibility levels per subject, restarts, a corrupt file, and
 * bad input refused with Confluent's error codes, never an internal error.
 */
import { describe, expect, it } from "vitest";
import avsc from "avsc";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { utf8 } from "../../src/lib/bytes.ts";
import {
  jsonSchemaPropertiesMax,
  schemaBytesMax,
  schemaDepthMax,
  schemaValueDepthMax,
} from "../../src/lib/limits.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { RegistryError } from "../../src/registry/errors.ts";
import { SchemaRegistry } from "../../src/registry/registry.ts";
import { parseCompatibilityLevel } from "../../src/registry/compatibility.ts";
import { readWholeFile } from "../../src/fs/types.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";

async function openRegistry(fs = new MemoryFileSystem()) {
  if ((await fs.stat("/data")) === null) {
    await fs.mkdir("/data");
    await fs.syncDir("/");
  }
  const logger = new MemoryLogger();
  const registry = await SchemaRegistry.open({ fs, dataDir: "/data", logger });
  return { registry, fs, logger };
}

/** The RegistryError `fn` throws (or its promise rejects with). */
async function registryError(fn: () => unknown): Promise<RegistryError> {
  let caught: unknown;
  try {
    await fn();
  } catch (err) {
    caught = err;
  }
  expect(caught, "expected a RegistryError").toBeInstanceOf(RegistryError);
  return caught as RegistryError;
}

const record = (fields: object[], extra: object = {}) =>
  JSON.stringify({ type: "record", name: "Order", fields, ...extra });
const f1 = { name: "f1", type: "string" };
const f2 = { name: "f2", type: "int", default: 0 };

describe("schema identity and ids", () => {
  it("gives schemas that differ only in whitespace, CRLF or key order one id, and the same schema under two subjects the same id", async () => {
    const { registry } = await openRegistry();
    const a = await registry.register("s1", { schema: record([f1]) });
    const spaced = `{\r\n  "name" : "Order",\r\n  "fields": [ { "type": "string", "name": "f1" } ],\r\n  "type": "record"\r\n}`;
    expect(await registry.register("s1", { schema: spaced })).toEqual(a);
    const other = await registry.register("s2", { schema: spaced });
    expect(other.id).toBe(a.id);
    expect(other.version).toBe(1);
    expect(await registry.lookup("s2", { schema: record([f1]) })).toMatchObject({
      id: a.id,
      version: 1,
    });
    expect(registry.versionsOfId(a.id)).toEqual([
      { subject: "s1", version: 1 },
      { subject: "s2", version: 1 },
    ]);
  });

  it("gives Avro schemas with different field order different ids, since their encodings differ", async () => {
    const { registry } = await openRegistry();
    await registry.setCompatibility(undefined, "NONE");
    const ab = record([f1, { name: "f3", type: "int" }]);
    const ba = record([{ name: "f3", type: "int" }, f1]);
    const first = await registry.register("s", { schema: ab });
    const second = await registry.register("s", { schema: ba });
    expect(second.id).not.toBe(first.id);
    const value = { f1: "x", f3: 7 };
    const bytesA = avsc.Type.forSchema(JSON.parse(registry.schemaById(first.id).schema)).toBuffer(
      value,
    );
    const bytesB = avsc.Type.forSchema(JSON.parse(registry.schemaById(second.id).schema)).toBuffer(
      value,
    );
    expect(Buffer.compare(bytesA, bytesB)).not.toBe(0);
  });

  it("returns an older schema's own version when it is registered again, without making it latest", async () => {
    const { registry } = await openRegistry();
    const v1 = await registry.register("s", { schema: record([f1]) });
    const v2 = await registry.register("s", { schema: record([f1, f2]) });
    expect(v2.version).toBe(2);
    expect(await registry.register("s", { schema: record([f1]) })).toEqual(v1);
    expect(registry.version("s", "latest").version).toBe(2);
    expect(registry.versions("s")).toEqual([1, 2]);
  });

  it("consumes no id and no version for a refused registration", async () => {
    const { registry } = await openRegistry();
    await registry.register("s", { schema: record([f1]) });
    const error = await registryError(() =>
      registry.register("s", { schema: record([f1, { name: "f9", type: "int" }]) }),
    );
    expect(error.kind.errorCode).toBe(409);
    expect(error.message).toMatch(/f9/);
    const next = await registry.register("s", { schema: record([f1, f2]) });
    expect(next).toEqual({ id: 2, version: 2 });
  });

  it("continues version numbers after a soft delete, restarts them after a permanent one, and never gives an id to another schema", async () => {
    const { registry } = await openRegistry();
    const v1 = await registry.register("s", { schema: record([f1]) });
    expect(await registry.deleteSubject("s")).toEqual([1]);
    expect(registry.subjects()).toEqual([]);
    expect(registry.subjects({ deleted: true })).toEqual(["s"]);
    expect(registry.schemaById(v1.id).schema).toContain("f1"); // soft-deleted ids still resolve
    expect(await registry.register("s", { schema: record([f1]) })).toEqual({
      id: v1.id,
      version: 2,
    });
    await registry.deleteSubject("s");
    expect(await registry.deleteSubject("s", { permanent: true })).toEqual([1, 2]);
    expect((await registryError(() => registry.schemaById(v1.id))).kind.errorCode).toBe(40403);
    const other = await registry.register("t", { schema: record([f1, f2]) });
    expect(other.id).toBe(2);
    expect(await registry.register("s", { schema: record([f1]) })).toEqual({
      id: v1.id,
      version: 1,
    });
  });

  it("refuses deletes out of order with Confluent's codes", async () => {
    const { registry } = await openRegistry();
    await registry.register("s", { schema: record([f1]) });
    expect(
      (await registryError(() => registry.deleteSubject("s", { permanent: true }))).kind.errorCode,
    ).toBe(40405);
    expect(
      (await registryError(() => registry.deleteVersion("s", "1", { permanent: true }))).kind
        .errorCode,
    ).toBe(40407);
    expect(await registry.deleteVersion("s", "1")).toBe(1);
    expect((await registryError(() => registry.deleteVersion("s", "1"))).kind.errorCode).toBe(
      40406,
    );
    expect((await registryError(() => registry.deleteSubject("s"))).kind.errorCode).toBe(40404);
    expect((await registryError(() => registry.deleteSubject("nope"))).kind.errorCode).toBe(40401);
    expect((await registryError(() => registry.deleteVersion("s", "7"))).kind.errorCode).toBe(
      40402,
    );
    expect(await registry.deleteVersion("s", "1", { permanent: true })).toBe(1);
    expect(
      (await registryError(() => registry.versions("s", { deleted: true }))).kind.errorCode,
    ).toBe(40401);
  });

  it("leaves a change whose write fails out of effect (50001), consuming no id", async () => {
    const { registry, fs } = await openRegistry();
    await registry.register("s", { schema: record([f1]) });
    for (const op of ["write", "sync", "rename"] as const) {
      fs.faults.failNext({ op, code: "EIO" });
      const error = await registryError(() => registry.register("s", { schema: record([f1, f2]) }));
      expect(error.kind.errorCode, op).toBe(50001);
      expect(error.message, op).toMatch(/schemas\.json.*EIO/);
      expect(registry.versions("s"), op).toEqual([1]);
    }
    expect(await registry.register("s", { schema: record([f1, f2]) })).toEqual({
      id: 2,
      version: 2,
    });
  });

  it("gives 200 distinct schemas registered concurrently by 20 clients 200 distinct ids, the same after a restart", async () => {
    const fs = new MemoryFileSystem();
    const { registry } = await openRegistry(fs);
    await registry.setCompatibility(undefined, "NONE");
    const schemaOf = (n: number) =>
      JSON.stringify({ type: "fixed", name: `F${n}`, size: 1 + (n % 7) });
    const ids = new Map<number, number>();
    await Promise.all(
      Array.from({ length: 20 }, async (_, client) => {
        for (let k = 0; k < 10; k++) {
          const n = client * 10 + k;
          const { id } = await registry.register(`s${client % 4}`, { schema: schemaOf(n) });
          ids.set(n, id);
          // Another client registers the same schema under another subject: same id.
          expect((await registry.register(`copy${client}`, { schema: schemaOf(n) })).id).toBe(id);
        }
      }),
    );
    expect(new Set(ids.values()).size).toBe(200);
    await registry.close();
    const reopened = (await openRegistry(fs)).registry;
    for (const [n, id] of ids)
      expect(JSON.parse(reopened.schemaById(id).schema)).toEqual(JSON.parse(schemaOf(n)));
  });

  it("keeps ids, versions and levels across a restart", async () => {
    const fs = new MemoryFileSystem();
    const first = await openRegistry(fs);
    const a = await first.registry.register("s", { schema: record([f1]) });
    const b = await first.registry.register("s", { schema: record([f1, f2]) });
    await first.registry.setCompatibility("s", "FULL");
    await first.registry.close();
    fs.crash({ mode: "dropAll" });
    const { registry } = await openRegistry(fs);
    expect(await registry.lookup("s", { schema: record([f1, f2]) })).toMatchObject({
      id: b.id,
      version: 2,
    });
    expect(registry.schemaById(a.id).schema).toContain("f1");
    expect(registry.compatibility("s")).toBe("FULL");
    expect((await registry.register("t", { schema: JSON.stringify("string") })).id).toBe(3);
  });
});

describe("compatibility levels per subject", () => {
  it("falls back to the global level once a subject's level is deleted, and forgets it with the subject", async () => {
    const { registry } = await openRegistry();
    await registry.setCompatibility(undefined, "FORWARD");
    await registry.setCompatibility("s", "NONE");
    expect(registry.compatibility("s")).toBe("NONE");
    expect(await registry.deleteCompatibility("s")).toBe("NONE");
    expect((await registryError(() => registry.compatibility("s"))).kind.errorCode).toBe(40408);
    expect(registry.compatibility("s", { defaultToGlobal: true })).toBe("FORWARD");
    await registry.setCompatibility("s", "FULL");
    await registry.register("s", { schema: record([f1]) });
    await registry.deleteSubject("s");
    expect(registry.compatibility("s")).toBe("FULL"); // a soft delete keeps it
    await registry.deleteSubject("s", { permanent: true });
    expect(registry.compatibility("s", { defaultToGlobal: true })).toBe("FORWARD");
    expect(await registry.deleteCompatibility()).toBe("FORWARD");
    expect(registry.compatibility()).toBe("BACKWARD");
  });
});

describe("a corrupt schemas.json", () => {
  for (const [what, content] of [
    ["empty", ""],
    ["not JSON", "{oops"],
    [
      "an id at or past next_id",
      JSON.stringify({
        format: 1,
        next_id: 1,
        compatibility: "BACKWARD",
        schemas: [{ id: 1, schema_type: "AVRO", schema: '"int"' }],
        subjects: [],
        subject_compatibility: {},
      }),
    ],
    [
      "a version naming a missing id",
      JSON.stringify({
        format: 1,
        next_id: 2,
        compatibility: "BACKWARD",
        schemas: [],
        subjects: [
          { subject: "s", next_version: 2, versions: [{ version: 1, id: 1, deleted: false }] },
        ],
        subject_compatibility: {},
      }),
    ],
  ] as const) {
    it(`(${what}) makes the registry unavailable with the reason, never empty, and leaves the file alone`, async () => {
      const fs = new MemoryFileSystem();
      fs.writeFileSync("/data/schemas.json", utf8(content));
      const { registry, logger } = await openRegistry(fs);
      expect(registry.unavailableReason).toMatch(/schemas\.json/);
      expect(logger.named("registry.unavailable")).toHaveLength(1);
      for (const call of [
        () => registry.subjects(),
        () => registry.register("s", { schema: '"int"' }),
        () => registry.schemaById(1),
        () =>
          registry.checkBatch(
            { bytes: new Uint8Array(0), count: 0 },
            { value: { subject: "s", format: "confluent" } },
          ),
      ]) {
        const error = await registryError(call);
        expect(error.kind.errorCode).toBe(50002);
        expect(error.message).toMatch(/schemas\.json/);
      }
      expect(new TextDecoder().decode(await readWholeFile(fs, "/data/schemas.json", 1 << 20))).toBe(
        content,
      );
    });
  }
});

describe("bad input", () => {
  const deep = (levels: number) =>
    `${'{"type":"array","items":'.repeat(levels)}"int"${"}".repeat(levels)}`;
  const cases: [string, () => Promise<unknown> | unknown, number, RegExp][] = [];
  it("is refused with a Confluent error code naming what was wrong", async () => {
    const { registry } = await openRegistry();
    await registry.register("s", { schema: record([f1]) });
    cases.push(
      [
        "schema text that is not JSON",
        () => registry.register("s", { schema: "{nope" }),
        42201,
        /not valid JSON/,
      ],
      [
        "an invalid Avro schema",
        () => registry.register("s", { schema: '{"type":"record","name":"R"}' }),
        42201,
        /Avro/,
      ],
      [
        "an invalid JSON Schema",
        () => registry.register("j", { schemaType: "JSON", schema: '{"type":"strin"}' }),
        42201,
        /JSON Schema/,
      ],
      [
        "an unsupported draft",
        () =>
          registry.register("j", {
            schemaType: "JSON",
            schema: '{"$schema":"http://json-schema.org/draft-04/schema#"}',
          }),
        42201,
        /draft/,
      ],
      [
        "an unresolvable $ref",
        () =>
          registry.register("j", {
            schemaType: "JSON",
            schema: '{"$ref":"https://example.com/x.json"}',
          }),
        42201,
        /JSON Schema/,
      ],
      [
        "PROTOBUF",
        () => registry.register("p", { schemaType: "PROTOBUF", schema: "syntax" }),
        42201,
        /PROTOBUF/,
      ],
      [
        "references",
        () =>
          registry.register("s", {
            schema: '"int"',
            references: [{ name: "x", subject: "y", version: 1 }],
          }),
        42201,
        /references/,
      ],
      [
        "a schema that is not a string",
        () => registry.register("s", { schema: { type: "int" } }),
        42201,
        /must be a string/,
      ],
      [
        `a schema nested ${schemaDepthMax * 100} levels`,
        () => registry.register("d", { schema: deep(schemaDepthMax * 100) }),
        42201,
        /schemaDepthMax/,
      ],
      [
        "a 10 MB schema",
        () =>
          registry.register("big", {
            schema: JSON.stringify({
              type: "enum",
              name: "E",
              symbols: ["A"],
              doc: "x".repeat(10 * 1024 * 1024),
            }),
          }),
        42201,
        new RegExp(`limit of ${schemaBytesMax} bytes`),
      ],
      [
        "an unknown compatibility level",
        () => parseCompatibilityLevel("SIDEWAYS", "Cannot set"),
        42203,
        /SIDEWAYS.*BACKWARD/,
      ],
      [
        "version 0 in a compatibility test",
        () => registry.testCompatibility("s", "0", { schema: '"int"' }),
        42202,
        /version "0"/,
      ],
      ["version text", () => registry.version("s", "1.5"), 42202, /not valid/],
      [
        "an empty subject name",
        () => registry.register("", { schema: '"int"' }),
        42208,
        /subject name/,
      ],
      [
        "a subject with a control character",
        () => registry.setCompatibility("a\u0001b", "NONE"),
        42208,
        /control/,
      ],
      ["an unknown schema id", () => registry.schemaById(99), 40403, /99/],
      ["an unknown subject", () => registry.version("nope", "latest"), 40401, /nope/],
    );
    for (const [what, call, code, message] of cases) {
      const error = await registryError(call);
      expect(error.kind.errorCode, what).toBe(code);
      expect(error.message, what).toMatch(message);
      expect(error.message.length, `${what}: the message stays short`).toBeLessThan(1000);
    }
    // A schema just inside the depth limit is fine.
    expect((await registry.register("d", { schema: deep(schemaDepthMax - 2) })).id).toBeGreaterThan(
      0,
    );
  });
});

describe("produce-time checks of deeply nested values", () => {
  it("refuse a value nested past the stack (recursive Avro, recursive JSON Schema) as an invalid record, never throwing", async () => {
    const { registry } = await openRegistry();
    const list = {
      type: "record",
      name: "Node",
      fields: [{ name: "next", type: ["null", "Node"] }],
    };
    const avroId = (await registry.register("list", { schema: JSON.stringify(list) })).id;
    const tree = {
      $ref: "#/definitions/t",
      definitions: { t: { type: "array", items: { $ref: "#/definitions/t" }, uniqueItems: true } },
    };
    const jsonId = (
      await registry.register("tree", { schemaType: "JSON", schema: JSON.stringify(tree) })
    ).id;
    const depth = 1_000_000;
    // Avro: branch 1 ("Node") a million times: each level is one byte (zig-zag 1 = 0x02), then null.
    const avroValue = new Uint8Array(5 + depth + 1).fill(2);
    avroValue.set([0, 0, 0, 0, avroId], 0);
    avroValue[avroValue.length - 1] = 0;
    const jsonText = `${"[".repeat(depth)}${"]".repeat(depth)}`;
    const jsonValue = new Uint8Array(5 + jsonText.length);
    jsonValue.set([0, 0, 0, 0, jsonId], 0);
    jsonValue.set(utf8(jsonText), 5);
    for (const [subject, value] of [
      ["list", avroValue],
      ["tree", jsonValue],
    ] as const) {
      const batch = new EntryBatchBuilder().add(null, value).build();
      const refusal = registry.checkBatch(batch, { value: { subject, format: "confluent" } });
      expect(refusal, subject).toMatchObject({ recordIndex: 0, subject, version: 1 });
      expect(refusal?.reason, subject).toMatch(
        new RegExp(`more than ${schemaValueDepthMax} levels deep \\(schemaValueDepthMax\\)`),
      );
      expect(refusal?.reason, subject).not.toMatch(/stack/i);
    }
    // At the limit both pass; one level more (and the report's 5 000) is refused, naming it.
    const avroAt = (levels: number) => {
      // `levels` records: levels - 1 times branch 1 (0x02), then branch 0 (null).
      const v = new Uint8Array(5 + levels).fill(2);
      v.set([0, 0, 0, 0, avroId], 0);
      v[v.length - 1] = 0;
      return v;
    };
    const jsonAt = (levels: number) =>
      Uint8Array.of(0, 0, 0, 0, jsonId, ...utf8(`${"[".repeat(levels)}${"]".repeat(levels)}`));
    for (const [subject, at] of [
      ["list", avroAt],
      ["tree", jsonAt],
    ] as const) {
      const check = (levels: number) =>
        registry.checkBatch(new EntryBatchBuilder().add(null, at(levels)).build(), {
          value: { subject, format: "confluent" },
        });
      expect(check(schemaValueDepthMax), subject).toBeNull();
      for (const levels of [schemaValueDepthMax + 1, 5_000])
        expect(check(levels)?.reason, `${subject} ${levels}`).toContain(
          `more than ${schemaValueDepthMax} levels deep`,
        );
    }
    // A shallow one of each passes.
    const shallowAvro = Uint8Array.of(0, 0, 0, 0, avroId, 2, 0);
    const shallowJson = Uint8Array.of(0, 0, 0, 0, jsonId, ...utf8("[[],[[]]]"));
    for (const [subject, value] of [
      ["list", shallowAvro],
      ["tree", shallowJson],
    ] as const) {
      const batch = new EntryBatchBuilder().add(null, value).build();
      expect(
        registry.checkBatch(batch, { value: { subject, format: "confluent" } }),
        subject,
      ).toBeNull();
    }
  });
});

describe("produce-time checks of Avro item counts", () => {
  it("refuse a value whose array or map claims more items than its bytes can hold (13 bytes claiming 10^9 nulls ran the broker out of memory), and pass honest ones", async () => {
    const { registry } = await openRegistry();
    const subjects = {
      nulls: { type: "array", items: "null" },
      ints: { type: "array", items: "int" },
      maps: { type: "map", values: "null" },
      nested: {
        type: "record",
        name: "R",
        fields: [{ name: "xs", type: { type: "array", items: { type: "array", items: "null" } } }],
      },
    };
    const ids: Record<string, number> = {};
    for (const [subject, schema] of Object.entries(subjects))
      ids[subject] = (await registry.register(subject, { schema: JSON.stringify(schema) })).id;
    const framed = (id: number, body: number[]) => Uint8Array.of(0, 0, 0, 0, id, ...body);
    const billion = [0x80, 0xa8, 0xd6, 0xb9, 0x07]; // zig-zag varint of 10^9
    const check = (subject: string, value: Uint8Array) =>
      registry.checkBatch(new EntryBatchBuilder().add(null, value).build(), {
        value: { subject, format: "confluent" },
      });
    for (const subject of ["nulls", "ints", "maps", "nested"]) {
      const refusal = check(subject, framed(ids[subject], [...billion, 0]));
      expect(refusal, subject).toMatchObject({ recordIndex: 0, subject, version: 1 });
      expect(refusal?.reason, subject).toMatch(/more array or map items than/);
    }
    // Honest values: 1,000 nulls (3 bytes: count 1000 = 0xd0 0x0f, then the end block), two ints,
    // and an array of two empty arrays.
    expect(check("nulls", framed(ids.nulls, [0xd0, 0x0f, 0]))).toBeNull();
    expect(check("ints", framed(ids.ints, [4, 2, 4, 0]))).toBeNull();
    expect(check("nested", framed(ids.nested, [4, 0, 0, 0]))).toBeNull();
    // A negative count (followed by the block's byte size) is bounded the same way.
    expect(check("nulls", framed(ids.nulls, [0xff, 0xa7, 0xd6, 0xb9, 0x07, 0, 0]))?.reason).toMatch(
      /more array or map items than/,
    );
  });
});

describe("JSON Schema patterns", () => {
  it("run in linear time, so a catastrophic pattern cannot stall the broker, and keep their meaning", async () => {
    const { registry } = await openRegistry();
    // On JavaScript's backtracking engine this check took seconds at 31 characters, doubling
    // with each one more (found by the attacker of the registry).
    const schema = {
      type: "object",
      properties: { s: { type: "string", pattern: "^(a+)+$" } },
      patternProperties: { "^x-(b+)+$": { type: "integer" } },
    };
    await registry.register("redos", { schemaType: "JSON", schema: JSON.stringify(schema) });
    const check = (value: unknown) =>
      registry.checkBatch(new EntryBatchBuilder().add(null, utf8(JSON.stringify(value))).build(), {
        value: { subject: "redos", format: "json" },
      });
    const started = performance.now();
    const refusal = check({ s: `${"a".repeat(5_000)}!` });
    expect(performance.now() - started).toBeLessThan(2_000);
    expect(refusal?.path).toBe("/s");
    expect(check({ s: "aaaa" })).toBeNull();
    // Two patterns in one schema each keep their own meaning (ajv caches compiled patterns).
    expect(check({ [`x-${"b".repeat(5_000)}`]: "not an integer" })?.path).toMatch(/^\/x-b+$/);
    expect(check({ "x-bb": 1, s: "a" })).toBeNull();
    // A pattern is searched for anywhere in the string, as JSON Schema says.
    await registry.register("search", {
      schemaType: "JSON",
      schema: JSON.stringify({ type: "string", pattern: "b" }),
    });
    const search = (value: string) =>
      registry.checkBatch(new EntryBatchBuilder().add(null, utf8(JSON.stringify(value))).build(), {
        value: { subject: "search", format: "json" },
      });
    expect(search("abc")).toBeNull();
    expect(search("ac")).not.toBeNull();
  });

  it("outside RE2's syntax (lookaround, backreferences) make the schema invalid, named at registration", async () => {
    const { registry } = await openRegistry();
    for (const pattern of ["^(?=a)a$", "^(a)\\1$"]) {
      const err = await registry
        .register("bad", {
          schemaType: "JSON",
          schema: JSON.stringify({ type: "string", pattern }),
        })
        .catch((e: unknown) => e);
      expect(err, pattern).toBeInstanceOf(RegistryError);
      expect((err as RegistryError).kind.errorCode, pattern).toBe(42201);
    }
  });
});

describe("invalid schema messages", () => {
  it("hints at schemaType JSON when a JSON Schema is registered as Avro, and only then", async () => {
    const { registry } = await openRegistry();
    const asAvro = await registryError(() =>
      registry.register("s", { schema: JSON.stringify({ type: "object", properties: {} }) }),
    );
    expect(asAvro.message).toMatch(/not a valid Avro schema.*schemaType "JSON", CLI --type JSON/);
    const badAvro = await registryError(() =>
      registry.register("s", { schema: JSON.stringify({ type: "recrod", name: "x" }) }),
    );
    expect(badAvro.message).toMatch(/not a valid Avro schema/);
    expect(badAvro.message).not.toMatch(/JSON Schema/);
  });
});

describe("produce-time checks of Avro longs", () => {
  /** Zigzag varint of a 64-bit long, as every Avro writer encodes it. */
  const zigzag = (v: bigint): number[] => {
    let n = v < 0n ? ((-v - 1n) << 1n) | 1n : v << 1n;
    const out: number[] = [];
    while (n > 0x7fn) {
      out.push(Number(n & 0x7fn) | 0x80);
      n >>= 7n;
    }
    out.push(Number(n));
    return out;
  };

  it("accept every 64-bit value (|v| ≥ 2^53 − 1 was refused as a potential precision loss), plain, in arrays and as timestamp-nanos, and refuse varints past 64 bits", async () => {
    const { registry } = await openRegistry();
    const subjects = {
      plain: { type: "record", name: "E", fields: [{ name: "ts_nanos", type: "long" }] },
      // Arrays take the bounded walk instead of avsc's decode: the same long type there.
      walked: {
        type: "record",
        name: "W",
        fields: [
          { name: "ids", type: { type: "array", items: "long" } },
          { name: "t", type: { type: "long", logicalType: "timestamp-nanos" } },
        ],
      },
    };
    const ids: Record<string, number> = {};
    for (const [subject, schema] of Object.entries(subjects))
      ids[subject] = (await registry.register(subject, { schema: JSON.stringify(schema) })).id;
    const framed = (id: number, body: number[]) => Uint8Array.of(0, 0, 0, 0, id, ...body);
    const check = (subject: string, value: Uint8Array) =>
      registry.checkBatch(new EntryBatchBuilder().add(null, value).build(), {
        value: { subject, format: "confluent" },
      });
    const values = [
      0n,
      9007199254740990n,
      9007199254740991n,
      -9007199254740991n,
      9007199254740993n,
      1796300374145000000n,
      2n ** 63n - 1n,
      -(2n ** 63n),
    ];
    for (const v of values) {
      expect(check("plain", framed(ids.plain, zigzag(v))), String(v)).toBeNull();
      const body = [2, ...zigzag(v), 0, ...zigzag(v)]; // one block of one item, the end, then t
      expect(check("walked", framed(ids.walked, body)), String(v)).toBeNull();
      // The oracle: avsc with its BigInt long reads the same bytes back as v.
      const oracle = avsc.types.LongType.__with({
        fromBuffer: (b: Buffer) => b.readBigInt64LE(),
        toBuffer: (n: bigint) => {
          const b = Buffer.alloc(8);
          b.writeBigInt64LE(n);
          return b;
        },
        fromJSON: BigInt,
        toJSON: Number,
        isValid: (n: unknown) => typeof n === "bigint",
        compare: (a: bigint, b: bigint) => (a === b ? 0 : a < b ? -1 : 1),
      });
      expect(oracle.fromBuffer(Buffer.from(zigzag(v)))).toBe(v);
    }
    // Eleven bytes, or ten whose last carries more than the 64th bit: not a long.
    const tooLong = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    const past64 = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
    for (const body of [tooLong, past64]) {
      expect(check("plain", framed(ids.plain, body))?.reason).toMatch(/does not fit 64 bits/);
      expect(check("walked", framed(ids.walked, [2, ...body, 0, 0]))?.reason).toMatch(
        /does not fit 64 bits/,
      );
    }
    // A truncated varint still ends inside the value.
    expect(check("plain", framed(ids.plain, [0xff, 0xff]))).not.toBeNull();
  });

  it("keep long defaults and promotions: int → long, long → double compatible, long → int not", async () => {
    const { registry } = await openRegistry();
    const one = (type: string, extra: object = {}) =>
      JSON.stringify({ type: "record", name: "E", fields: [{ name: "x", type, ...extra }] });
    await registry.register("p", { schema: one("int") });
    expect(
      (await registry.testCompatibility("p", "latest", { schema: one("long") })).compatible,
    ).toBe(true);
    await registry.register("q", { schema: one("long") });
    expect(
      (await registry.testCompatibility("q", "latest", { schema: one("double") })).compatible,
    ).toBe(true);
    expect(
      (await registry.testCompatibility("q", "latest", { schema: one("int") })).compatible,
    ).toBe(false);
    await registry.register("d", {
      schema: JSON.stringify({
        type: "record",
        name: "E",
        fields: [{ name: "x", type: "long", default: 2 ** 60 }],
      }),
    });
    const bad = await registryError(() =>
      registry.register("d2", { schema: one("long", { default: 1.5 }) }),
    );
    expect(bad.message).toMatch(/invalid "long": 1\.5/);
    // Long.MAX_VALUE reaches avsc rounded to 2^63 (out of range): refused, naming the number.
    const rounded = await registryError(() =>
      registry.register("d3", {
        schema:
          '{"type":"record","name":"E","fields":[{"name":"x","type":"long","default":9223372036854775807}]}',
      }),
    );
    expect(rounded.message).toMatch(/invalid "long": 9223372036854776000/);
  });
});

describe("JSON Schema root references", () => {
  it('accept "$ref": "#" (recursion to the root, draft-07 and 2020-12) and enforce it at every level', async () => {
    const { registry } = await openRegistry();
    const drafts = {
      d7: {},
      d2020: { $schema: "https://json-schema.org/draft/2020-12/schema" },
    };
    for (const [subject, extra] of Object.entries(drafts)) {
      const schema = {
        ...extra,
        type: "object",
        properties: { v: { type: "integer" }, child: { $ref: "#" } },
      };
      await registry.register(subject, { schemaType: "JSON", schema: JSON.stringify(schema) });
      const check = (value: unknown) =>
        registry.checkBatch(
          new EntryBatchBuilder().add(null, utf8(JSON.stringify(value))).build(),
          { value: { subject, format: "json" } },
        );
      expect(check({ v: 1, child: { v: 2, child: { v: 3 } } }), subject).toBeNull();
      expect(check({ v: 1, child: { v: 2, child: { v: "x" } } })?.path, subject).toBe(
        "/child/child/v",
      );
      expect(check({ child: 5 })?.path, subject).toBe("/child");
    }
    // A schema's own $id still wins.
    const withId = { $id: "http://x/y", type: "object", properties: { c: { $ref: "#" } } };
    await registry.register("id", { schemaType: "JSON", schema: JSON.stringify(withId) });
  });
});

describe("JSON Schema width", () => {
  it("refuses a properties object past jsonSchemaPropertiesMax by its path (25 000 names stalled the broker 5 s, then overflowed the stack), on the open test route as on registration", async () => {
    const { registry } = await openRegistry();
    await registry.register("small", { schemaType: "JSON", schema: '{"type":"object"}' });
    const wide = (n: number) => {
      const properties: Record<string, object> = {};
      for (let i = 0; i < n; i++) properties[`q${i}`] = { type: "string" };
      return JSON.stringify({
        type: "object",
        properties: { inner: { type: "object", properties } },
      });
    };
    for (const run of [
      () =>
        registry.testCompatibility("small", "latest", { schemaType: "JSON", schema: wide(25_000) }),
      () =>
        registry.register("big", { schemaType: "JSON", schema: wide(jsonSchemaPropertiesMax + 1) }),
    ]) {
      const err = await registryError(run);
      expect(err.kind.errorCode).toBe(42201);
      expect(err.message).toContain(`"properties" at "/properties/inner/properties" names`);
      expect(err.message).toContain(`over the limit of ${jsonSchemaPropertiesMax} per object`);
    }
    await registry.register("ok", { schemaType: "JSON", schema: wide(100) });
  });
});

describe("integers past 2^53 in schema texts", () => {
  it("keep their digits in the canonical text, so schemas differing only there get their own ids, also after a restart", async () => {
    const fs = new MemoryFileSystem();
    const { registry } = await openRegistry(fs);
    const text = (max: string) =>
      `{"type":"integer", "maximum": ${max}, "description": "x 9007199254740993 \\" 1"}`;
    const a = await registry.register("big", {
      schemaType: "JSON",
      schema: text("9223372036854775807"),
    });
    const b = await registry.register("big2", {
      schemaType: "JSON",
      schema: text("9223372036854775808"),
    });
    const c = await registry.register("big3", {
      schemaType: "JSON",
      schema: text("-9223372036854775808"),
    });
    expect(new Set([a.id, b.id, c.id]).size).toBe(3);
    expect(registry.schemaById(a.id).schema).toBe(
      '{"description":"x 9007199254740993 \\" 1","maximum":9223372036854775807,"type":"integer"}',
    );
    expect(registry.schemaById(c.id).schema).toContain('"maximum":-9223372036854775808,');
    // Safe numbers keep the form they had (1.0 → 1, 1e2 → 100), so existing ids stay.
    const small = await registry.register("small", {
      schemaType: "JSON",
      schema: '{"type":"number","maximum":1e2,"minimum":1.0}',
    });
    expect(registry.schemaById(small.id).schema).toBe(
      '{"maximum":100,"minimum":1,"type":"number"}',
    );
    await registry.close();
    const reopened = (await openRegistry(fs)).registry;
    expect(reopened.schemaById(a.id).schema).toContain('"maximum":9223372036854775807,');
    const again = await reopened.register("big", {
      schemaType: "JSON",
      schema: text("9223372036854775807"),
    });
    expect(again.id).toBe(a.id);
  });
});
