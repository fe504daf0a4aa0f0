/**
 * The mirror's own consumer group on the edge (docs/edge.md "Exactly once"): clients may read it
 * but not join it or commit to it. A client that joined `mirror.upstream` made each of the
 * mirror's commits fail, so the durable position (lag, retention's hold, a restart's resume
 * point) stood still while the upstream moved on; a client's commit could move it.
 */
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";
import { waitFor } from "./helpers.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function post(url: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text === "" ? null : JSON.parse(text) };
}

describe(`[${target}] the mirror's consumer group`, () => {
  it("refuses clients that join or commit to it, and keeps committing its position", async () => {
    const { dir } = tempDir();
    const central = await startBroker(`${dir}/central`);
    running.push(central);
    const edge = await startBroker(`${dir}/edge`, [
      "--mirror-to",
      `${central.tcp.host}:${central.tcp.port}`,
      "--mirror-topics",
      "sensors",
    ]);
    running.push(edge);
    expect((await post(`${edge.httpUrl}/v1/topics`, { name: "sensors" })).status).toBe(201);
    const group = `${edge.httpUrl}/v1/groups/mirror.upstream`;
    const join = await post(`${group}/members`, {
      topics: ["sensors"],
      session_timeout_ms: 60_000,
    });
    expect(join.status, JSON.stringify(join.body)).toBe(403);
    expect(join.body.error).toMatchObject({
      code: "forbidden",
      details: { reason: "mirror_group" },
    });
    const commit = await post(`${group}/offsets`, {
      offsets: [{ topic: "sensors", partition: 0, offset: 0 }],
    });
    expect(commit.status, JSON.stringify(commit.body)).toBe(403);
    // Another group is the client's to use.
    expect(
      (await post(`${edge.httpUrl}/v1/groups/readers/members`, { topics: ["sensors"] })).status,
    ).toBe(200);

    const records = Array.from({ length: 5 }, (_, i) => ({ value: `r${i}` }));
    expect((await post(`${edge.httpUrl}/v1/topics/sensors/records`, { records })).status).toBe(200);
    await waitFor("the mirror to commit its position", async () => {
      const res = await fetch(group);
      if (res.status !== 200) return false;
      const described = (await res.json()) as {
        members: unknown[];
        offsets: { committed: number }[];
      };
      return described.members.length === 0 && described.offsets[0]?.committed === 5;
    });
    const upstream = await fetch(`${central.httpUrl}/v1/topics/sensors`);
    expect(((await upstream.json()) as any).partitions[0].high_watermark).toBe(5);
  });
});
