/**
 * The mirror's schema id translation (src/mirror/schemas.ts, docs/edge.md "Schema ids upstream"):
 * the framing helpers, which parts of a topic are framed, and how each answer of the upstream
 * registry is taken — found, registered, cached, refused (stop or wait), unreachable. The upstream
 * here answers as a scripted sequence; test/e2e/mirror-schemas.test.ts runs it against real brokers.
 */
import { describe, expect, it } from "vitest";
import {
  framedId,
  framedParts,
  SchemaIdTranslator,
  SchemaTranslationError,
  type RegistryAnswer,
  upstreamSubject,
  type UpstreamRegistry,
  withId,
} from "../../src/mirror/schemas.ts";

const edge = {
  schemaById: (id: number) =>
    id === 7 ? { schemaType: "AVRO", schema: '{"type":"string"}' } : null,
};

/** An upstream that answers `answers` in turn (an Error: no answer) and records each call. */
function upstream(answers: (RegistryAnswer | Error)[]): UpstreamRegistry & { calls: string[] } {
  const calls: string[] = [];
  return {
    url: "http://central:8080/registry",
    calls,
    async post(path: string, body: unknown) {
      calls.push(`${path} ${JSON.stringify(body)}`);
      const next = answers.shift();
      if (next === undefined) throw new Error("no more answers scripted");
      if (next instanceof Error) throw next;
      return next;
    },
  };
}

async function failure(p: Promise<unknown>): Promise<SchemaTranslationError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(SchemaTranslationError);
  return err as SchemaTranslationError;
}

describe("Confluent framing", () => {
  it("reads and rewrites the 4-byte id, never changing the input", () => {
    const bytes = Uint8Array.of(0, 0, 0, 1, 2, 9, 9);
    expect(framedId(bytes)).toBe(258);
    const out = withId(bytes, 0xfffffffe);
    expect(framedId(out)).toBe(0xfffffffe);
    expect([...out.subarray(5)]).toEqual([9, 9]);
    expect(framedId(bytes)).toBe(258);
    expect(framedId(Uint8Array.of(0, 0, 0, 1))).toBeNull();
    expect(framedId(Uint8Array.of(1, 0, 0, 0, 1))).toBeNull();
    expect(framedId(null)).toBeNull();
  });

  it("finds the framed parts of a topic from its config", () => {
    expect(framedParts({ value_schema_subject: "v" })).toEqual({ value: "v" });
    expect(framedParts({ key_schema_subject: "k", schema_format: "confluent" })).toEqual({
      key: "k",
    });
    expect(framedParts({ value_schema_subject: "v", schema_format: "json" })).toBeNull();
    expect(framedParts({})).toBeNull();
  });
});

describe("upstreamSubject", () => {
  it("renames TopicNameStrategy subjects with the topic and keeps every other subject", () => {
    expect(upstreamSubject("sensors.a-value", "sensors.a", "site17.sensors.a")).toBe(
      "site17.sensors.a-value",
    );
    expect(upstreamSubject("sensors.a-key", "sensors.a", "site17.sensors.a")).toBe(
      "site17.sensors.a-key",
    );
    // A record name, a subject shared by topics, another topic's subject: not this topic's name.
    expect(upstreamSubject("com.acme.Reading", "sensors.a", "site17.sensors.a")).toBe(
      "com.acme.Reading",
    );
    expect(upstreamSubject("sensors.b-value", "sensors.a", "x")).toBe("sensors.b-value");
    expect(upstreamSubject("sensors.a-values", "sensors.a", "x")).toBe("sensors.a-values");
    expect(upstreamSubject("sensors.a-value", "sensors.a", "sensors.a")).toBe("sensors.a-value");
  });
});

describe("SchemaIdTranslator", () => {
  it("finds the schema upstream first, then caches the id", async () => {
    const up = upstream([{ status: 200, body: { id: 3, version: 1 } }]);
    const t = new SchemaIdTranslator(edge, up);
    expect(await t.upstreamId("s-value", 7, "here")).toBe(3);
    expect(await t.upstreamId("s-value", 7, "here")).toBe(3);
    expect(up.calls).toEqual([
      `/subjects/s-value {"schema":"{\\"type\\":\\"string\\"}","schemaType":"AVRO"}`,
    ]);
  });

  it("registers it when the subject or the schema is not there", async () => {
    for (const code of [40401, 40403]) {
      const up = upstream([
        { status: 404, body: { error_code: code, message: "not found" } },
        { status: 200, body: { id: 12 } },
      ]);
      expect(await new SchemaIdTranslator(edge, up).upstreamId("a/b", 7, "here")).toBe(12);
      expect(up.calls.map((c) => c.split(" ")[0])).toEqual([
        "/subjects/a%2Fb",
        "/subjects/a%2Fb/versions",
      ]);
    }
  });

  it("stops on an incompatible schema, naming the subject, the edge id and the refusal", async () => {
    const up = upstream([
      { status: 404, body: { error_code: 40401, message: "no subject" } },
      {
        status: 409,
        body: { error_code: 409, message: "Schema being registered is incompatible" },
      },
    ]);
    const err = await failure(new SchemaIdTranslator(edge, up).upstreamId("s-value", 7, "here"));
    expect(err.kind).toBe("stop");
    expect(err.message).toContain('subject "s-value", edge schema id 7');
    expect(err.message).toContain("incompatible (error_code 409)");
  });

  it("waits on a refused key and on no answer; stops without a registry or an edge schema", async () => {
    const refused = await failure(
      new SchemaIdTranslator(
        edge,
        upstream([
          { status: 404, body: { error_code: 40403, message: "no schema" } },
          { status: 403, body: { error_code: 40301, message: "may not register_schema" } },
        ]),
      ).upstreamId("s", 7, "here"),
    );
    expect(refused.kind).toBe("refused");
    expect(refused.message).toContain("admin role");
    for (const answer of [
      new Error("ECONNREFUSED"),
      { status: 503, body: { error_code: 50002, message: "unavailable" } },
    ]) {
      const err = await failure(
        new SchemaIdTranslator(edge, upstream([answer])).upstreamId("s", 7, "here"),
      );
      expect(err.kind).toBe("unreachable");
    }
    const none = await failure(new SchemaIdTranslator(edge, null).upstreamId("s", 7, "topic t"));
    expect(none.kind).toBe("stop");
    expect(none.message).toContain("--mirror-registry-url");
    const unknown = await failure(
      new SchemaIdTranslator(edge, upstream([])).upstreamId("s", 8, "here"),
    );
    expect(unknown.kind).toBe("stop");
    expect(unknown.message).toContain("edge schema id 8");
    // Not a registry (a 404 without Confluent's error code), and an answer without an id.
    const notRegistry = await failure(
      new SchemaIdTranslator(edge, upstream([{ status: 404, body: null }])).upstreamId(
        "s",
        7,
        "here",
      ),
    );
    expect(notRegistry.kind).toBe("stop");
    expect(notRegistry.message).toContain("/registry");
    const noId = await failure(
      new SchemaIdTranslator(edge, upstream([{ status: 200, body: { ok: true } }])).upstreamId(
        "s",
        7,
        "here",
      ),
    );
    expect(noId.kind).toBe("stop");
  });
});
