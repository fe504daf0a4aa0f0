/**
 * Large fetch answers written a slice at a time (docs/http-api.md "Large answers are written a
 * slice at a time"), through the real process: values of control bytes, which `utf8` writes as
 * six-byte `\u0001` escapes, make a fetch of 8 MiB an answer of 16 MiB; the broker writes it in
 * many slices (counted by `GET /v1/admin/metrics`, not timed) and serves a produce sent meanwhile
 * before the answer is done; the answer stays within twice `max_bytes` plus one record; sent in
 * more than one buffer it carries its exact `Content-Length`. Reading on from `next_offset` (the
 * `Next-Offset` header) in JSON and NDJSON, utf8 and base64, gives every record produced, once,
 * in order, for generated records of every kind and size up to 256 KiB.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Prng } from "../../src/lib/prng.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

const KiB = 1024;
const MiB = 1024 * KiB;

let broker: BrokerProcess;
let dir: string;
/** The records of partition 0 of topic "ctl", in offset order, as produced. */
const produced: { key: Uint8Array | null; value: Uint8Array }[] = [];

/** `n` bytes of one kind: control bytes, printable ASCII, multi-byte UTF-8 text. */
function bytesOf(prng: Prng, kind: number, n: number): Uint8Array {
  if (kind === 0) return new Uint8Array(n).fill(1 + prng.int(31));
  if (kind === 1) return new Uint8Array(n).map(() => 0x20 + prng.int(95));
  const out = new Uint8Array(n + 3);
  let at = 0;
  while (at < n) {
    const c = utf8Chars[prng.int(utf8Chars.length)];
    out.set(c, at);
    at += c.length;
  }
  return out.subarray(0, at);
}

/** Characters of 1 to 4 bytes in UTF-8, some escaped in JSON. */
const utf8Chars = ["é", "€", "🎉", "\u0002", '"', "\\", "\n", "a"].map((c) =>
  new TextEncoder().encode(c),
);

async function post(path: string, body: unknown): Promise<Response> {
  return fetch(`${broker.httpUrl}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

const b64 = (bytes: Uint8Array): string => Buffer.from(bytes).toString("base64");

async function metrics(): Promise<{ answers: number; slices: number }> {
  const m = (await (await fetch(`${broker.httpUrl}/v1/admin/metrics`)).json()) as Record<
    string,
    number
  >;
  return { answers: m.http_fetch_answers, slices: m.http_fetch_answer_slices };
}

beforeAll(async () => {
  // 16 MiB of 512 KiB values of control bytes, then records of every kind and size; made
  // before the broker starts, so that no connection of the client sits idle meanwhile.
  const prng = new Prng(2026);
  const batches: { key: Uint8Array | null; value: Uint8Array }[][] = [];
  for (let b = 0; b < 4; b++)
    batches.push(
      Array.from({ length: 8 }, () => ({ key: null, value: bytesOf(prng, 0, 512 * KiB) })),
    );
  for (let b = 0; b < 3; b++)
    batches.push(
      Array.from({ length: 12 }, () => ({
        key: prng.int(2) === 0 ? null : bytesOf(prng, prng.int(3), prng.int(70 * KiB)),
        value: bytesOf(prng, prng.int(3), prng.int(256 * KiB)),
      })),
    );
  // One broker and its records for both tests (tempDir() is for inside a test).
  dir = mkdtempSync(join(tmpdir(), "es-broker-test-"));
  broker = await startBroker(`${dir}/data`);
  for (const name of ["ctl", "ping"])
    expect((await post("/v1/topics", { name, partitions: 1 })).status).toBe(201);
  for (const batch of batches) {
    const records = batch.map((r) => ({
      ...(r.key === null ? {} : { key_b64: b64(r.key) }),
      value_b64: b64(r.value),
    }));
    const res = await post("/v1/topics/ctl/records", { records });
    expect(res.status, await res.text()).toBe(200);
    produced.push(...batch);
  }
});

afterAll(async () => {
  await broker?.stop("SIGKILL");
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

describe("large fetch answers", () => {
  it("are written in many slices, a produce sent meanwhile acknowledged before the answer", async () => {
    const records = `${broker.httpUrl}/v1/topics/ctl/partitions/0/records`;
    for (const [encoding, accept] of [
      ["utf8", "application/json"],
      ["utf8", "application/x-ndjson"],
      ["base64", "application/json"],
    ]) {
      const before = await metrics();
      const order: string[] = [];
      const answer = fetch(`${records}?offset=0&encoding=${encoding}&max_bytes=${8 * MiB}`, {
        headers: { accept },
      }).then((res) => {
        order.push("fetch answered");
        return res;
      });
      // Sent while the answer is being written: served between two of its slices.
      const ack = post("/v1/topics/ping/records", { records: [{ value: "x" }] }).then((res) => {
        order.push("produce acknowledged");
        return res;
      });
      const [res, acked] = await Promise.all([answer, ack]);
      expect(acked.status).toBe(200);
      expect(res.status).toBe(200);
      const body = new Uint8Array(await res.arrayBuffer());
      expect(res.headers.get("transfer-encoding")).toBeNull();
      expect(res.headers.get("content-length")).toBe(String(body.length));
      const after = await metrics();
      expect(after.answers - before.answers).toBe(1);
      const slices = after.slices - before.slices;
      // About a slice per MiB of answer; far more than one however the slices fall.
      expect(slices, `${encoding} ${accept}: ${body.length} bytes`).toBeGreaterThanOrEqual(
        Math.floor(body.length / MiB) - 1,
      );
      expect(slices).toBeGreaterThan(8);
      // Within twice max_bytes plus the one record that took it past.
      expect(body.length).toBeLessThanOrEqual(2 * 8 * MiB + 6 * 512 * KiB + 200);
      if (encoding === "utf8") {
        expect(body.length).toBeGreaterThan(2 * 8 * MiB);
        expect(order).toEqual(["produce acknowledged", "fetch answered"]);
      }
    }
  }, 120_000);

  it("read on from next_offset, give every record produced once, in order", async () => {
    const records = `${broker.httpUrl}/v1/topics/ctl/partitions/0/records`;
    const decoder = new TextDecoder();
    for (const encoding of ["utf8", "base64"] as const) {
      for (const ndjson of [false, true]) {
        const seen: { key: string | null; value: string }[] = [];
        // The last control-byte values and every record after them.
        const from = 28;
        let offset = from;
        for (let pages = 0; pages < 200 && offset < produced.length; pages++) {
          const res = await fetch(
            `${records}?offset=${offset}&encoding=${encoding}&max_bytes=${1 * MiB}`,
            { headers: ndjson ? { accept: "application/x-ndjson" } : {} },
          );
          expect(res.status).toBe(200);
          const text = await res.text();
          let page: { offset: number; key: string | null; value: string }[];
          let next: number;
          if (ndjson) {
            page =
              text === ""
                ? []
                : text
                    .slice(0, -1)
                    .split("\n")
                    .map((l) => JSON.parse(l));
            next = Number(res.headers.get("next-offset"));
          } else {
            const json = JSON.parse(text) as { records: typeof page; next_offset: number };
            page = json.records;
            next = json.next_offset;
          }
          expect(page.length).toBeGreaterThan(0);
          expect(page[0].offset).toBe(offset);
          expect(next).toBe(page[page.length - 1].offset + 1);
          for (const r of page) seen.push({ key: r.key, value: r.value });
          offset = next;
        }
        const text = (bytes: Uint8Array): string =>
          encoding === "base64" ? b64(bytes) : decoder.decode(bytes);
        const want = produced.slice(from);
        expect(seen.length, `${encoding} ndjson=${ndjson}`).toBe(want.length);
        // Compared one by one: a diff of megabytes of strings would take longer than the test.
        const differs = want.findIndex(
          (r, i) =>
            seen[i].key !== (r.key === null ? null : text(r.key)) ||
            seen[i].value !== text(r.value),
        );
        expect(differs, `${encoding} ndjson=${ndjson}: record ${from + differs}`).toBe(-1);
      }
    }
  }, 120_000);
});
