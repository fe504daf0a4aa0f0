/**
 * End-to-end: the real broker process, real sockets, real files. The command under test comes from
 * ES_BROKER_CMD (see harness.ts), so this file runs against every runtime target.
 */
import { afterEach, describe, expect, it } from "vitest";
import { readFileSync, statSync, readdirSync } from "node:fs";
import * as net from "node:net";
import { TcpClient } from "../../src/client/client.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { tempDir } from "../helpers/tmp.ts";
import { runCli, scaled, startBroker, target, type BrokerProcess } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

async function start(dataDir: string, extra: string[] = []): Promise<BrokerProcess> {
  const b = await startBroker(dataDir, extra);
  running.push(b);
  return b;
}

function value(producer: number, seq: number): Uint8Array {
  // Distinct, self-describing values of varying length, so a misplaced record is caught.
  return new TextEncoder().encode(`p${producer}-s${seq}-${"v".repeat((producer * 7 + seq) % 64)}`);
}

describe(`[${target}] es-broker end to end`, () => {
  it("keeps every acknowledged record through SIGKILL under 8 concurrent TCP producers", async () => {
    const { dir } = tempDir();
    const partitions = 4;
    const total = scaled(100_000); // 100 000 on node, 30 000 on the other targets
    const producers = 8;
    const batchSize = 50;
    let broker = await start(`${dir}/data`);
    const admin = await TcpClient.connect(broker.tcp);
    await admin.createTopic({ name: "load", partitions, config: { segment_bytes: 256 * 1024 } });
    await admin.close();

    // acked.get(`${partition}:${offset}`) = the value acknowledged there.
    const acked = new Map<string, string>();
    let ackedCount = 0;
    const nextSeq = new Array<number>(producers).fill(0);
    const runProducers = async (port: number, stopAt: number, onProgress?: () => void) => {
      await Promise.all(
        Array.from({ length: producers }, async (_, p) => {
          const client = await TcpClient.connect({ host: "127.0.0.1", port });
          try {
            while (ackedCount < stopAt) {
              const b = new EntryBatchBuilder();
              const seqs: number[] = [];
              for (let i = 0; i < batchSize; i++) {
                const seq = nextSeq[p]++;
                seqs.push(seq);
                b.add(null, value(p, seq));
              }
              const partition = (p + seqs[0]) % partitions;
              const res = await client.produce("load", b.build(), { partition });
              expect(res.spans).toHaveLength(1);
              const span = res.spans[0];
              seqs.forEach((seq, i) =>
                acked.set(
                  `${span.partition}:${span.baseOffset + i}`,
                  Buffer.from(value(p, seq)).toString(),
                ),
              );
              ackedCount += seqs.length;
              onProgress?.();
            }
          } catch {
            // The broker was killed under us: unacknowledged batches are simply not in `acked`.
          } finally {
            await client.close().catch(() => {});
          }
        }),
      );
    };
    let killed = false;
    await runProducers(broker.tcp.port, total, () => {
      if (!killed && ackedCount >= total / 2) {
        killed = true;
        broker.proc.kill("SIGKILL");
      }
    });
    expect(killed).toBe(true);
    expect(await broker.stop("SIGKILL")).toBe("SIGKILL");
    running.splice(running.indexOf(broker), 1);

    broker = await start(`${dir}/data`);
    await runProducers(broker.tcp.port, total);
    expect(ackedCount).toBeGreaterThanOrEqual(total);

    const reader = await TcpClient.connect(broker.tcp);
    let seen = 0;
    for (let partition = 0; partition < partitions; partition++) {
      const { highWatermark, logStartOffset } = await reader.listOffsets({
        topic: "load",
        partition,
      });
      expect(logStartOffset).toBe(0);
      let offset = 0;
      while (offset < highWatermark) {
        const r = await reader.fetch({
          topic: "load",
          partition,
          offset,
          maxBytes: 4 * 1024 * 1024,
          maxRecords: 20_000,
        });
        for (const rec of r.records) {
          expect(rec.offset).toBe(offset); // contiguous
          const want = acked.get(`${partition}:${rec.offset}`);
          const got = Buffer.from(rec.value).toString();
          if (want !== undefined) {
            expect(got).toBe(want);
            seen++;
          } else {
            // Written but never acknowledged (in flight at the kill): still a producer's record.
            expect(got).toMatch(/^p\d+-s\d+-v*$/);
          }
          offset++;
        }
        expect(r.records.length).toBeGreaterThan(0);
      }
    }
    await reader.close();
    expect(seen).toBe(acked.size);
  });

  it("round-trips a real text file through `produce` and `consume --from-beginning`", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const addr = `${broker.tcp.host}:${broker.tcp.port}`;
    const created = await runCli([
      "topics",
      "create",
      "file",
      "--partitions",
      "1",
      "--broker",
      addr,
    ]);
    expect(created.code, created.stderr).toBe(0);
    const input = readFileSync("package-lock.json");
    const produced = await runCli(["produce", "file", "--broker", addr], input);
    expect(produced.code, produced.stderr).toBe(0);
    const consumed = await runCli(["consume", "file", "--from-beginning", "--broker", addr]);
    expect(consumed.code, consumed.stderr).toBe(0);
    expect(consumed.stdout.equals(input)).toBe(true);
    const listed = await runCli(["topics", "list", "--broker", addr]);
    expect(listed.stdout.toString()).toBe("file\n");
  });

  it("answers a bad HTTP body with 400 and appends nothing", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const post = (path: string, body: string, type = "application/json") =>
      fetch(`${broker.httpUrl}${path}`, {
        method: "POST",
        headers: { "content-type": type },
        body,
      });
    expect((await post("/v1/topics", JSON.stringify({ name: "h", partitions: 1 }))).status).toBe(
      201,
    );
    expect(
      (await post("/v1/topics/h/records", JSON.stringify({ records: [{ value: "ok" }] }))).status,
    ).toBe(200);
    const bad = [
      '{"records":[{"value":"fine"},{"value_b64":"not base64!"}]}',
      '{"records":[{"value":"fine"},{"value":1}]}',
      '{"records":[{"value":"fine"},{"value":"x","partition":-1}]}',
      '{"records": [',
      '{"records":"nope"}',
    ];
    for (const body of bad) {
      const res = await post("/v1/topics/h/records", body);
      expect(res.status, body).toBe(400);
      const json = (await res.json()) as { error: { code: string; message: string } };
      expect(json.error.code).toMatch(/invalid/);
      expect(json.error.message.length).toBeGreaterThan(5);
    }
    const desc = (await (await fetch(`${broker.httpUrl}/v1/topics/h`)).json()) as {
      partitions: { high_watermark: number }[];
    };
    expect(desc.partitions[0].high_watermark).toBe(1);
    const big = await post(
      "/v1/topics/h/records",
      JSON.stringify({ records: [{ value: "x".repeat(2 * 1024 * 1024) }] }),
    );
    expect(big.status).toBe(200);
  });

  it("refuses a body over --max-request-bytes with 413 and closes a TCP connection that speaks HTTP", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`, ["--max-request-bytes", "65536"]);
    await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"name":"s","partitions":1}',
    });
    const res = await fetch(`${broker.httpUrl}/v1/topics/s/records`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ records: [{ value: "x".repeat(100_000) }] }),
    });
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe(
      "request_too_large",
    );

    const closed = await new Promise<boolean>((res) => {
      const s = net.connect(broker.tcp.port, broker.tcp.host, () =>
        s.write("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
      );
      s.on("data", () => {});
      s.on("close", () => res(true));
      s.on("error", () => {});
      setTimeout(() => res(false), 10_000);
    });
    expect(closed).toBe(true);
    // The broker still serves after that.
    expect((await fetch(`${broker.httpUrl}/healthz`)).status).toBe(200);
  });

  it("exits 0 on SIGTERM and leaves files 0600 and directories 0700", async () => {
    const { dir } = tempDir();
    const broker = await start(`${dir}/data`);
    const c = await TcpClient.connect(broker.tcp);
    await c.createTopic({ name: "perm", partitions: 2 });
    await c.produce("perm", [{ value: "a" }, { key: "k", value: "b" }]);
    await c.close();
    expect(await broker.stop("SIGTERM")).toBe(0);
    running.splice(running.indexOf(broker), 1);
    const walk = (p: string): void => {
      const st = statSync(p);
      if (st.isDirectory()) {
        expect(st.mode & 0o777, p).toBe(0o700);
        for (const n of readdirSync(p)) walk(`${p}/${n}`);
      } else {
        expect(st.mode & 0o777, p).toBe(0o600);
      }
    };
    walk(`${dir}/data`);
  });

  it("refuses a second broker on a data directory a live one holds, and takes over the lock of a killed one", async () => {
    const { dir } = tempDir();
    const first = await start(`${dir}/data`);
    const c = await TcpClient.connect(first.tcp);
    await c.createTopic({ name: "lock", partitions: 1 });
    await c.produce("lock", [{ value: "A1" }]);
    await c.close();
    const second = await runCli([
      "serve",
      "--data-dir",
      `${dir}/data`,
      "--http-port",
      "0",
      "--tcp-port",
      "0",
    ]);
    expect(second.code).toBe(1);
    expect(second.stderr).toMatch(/in use by process \d+/);
    const check = await runCli(["check", "--data-dir", `${dir}/data`]);
    expect(check.code).toBe(1);
    expect(check.stderr).toMatch(/a broker \(process \d+\) is running on it/);
    expect(await first.stop("SIGKILL")).toBe("SIGKILL");
    running.splice(running.indexOf(first), 1);
    const again = await start(`${dir}/data`);
    const r = await TcpClient.connect(again.tcp);
    const got = await r.fetch({ topic: "lock", partition: 0, offset: 0 });
    expect(got.records.map((x) => Buffer.from(x.value).toString())).toEqual(["A1"]);
    await r.close();
  });
});
