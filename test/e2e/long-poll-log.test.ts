/**
 * End-to-end: many long-polls in flight at once keep the log JSON lines (docs/operations.md
 * "Logs"). Every long-poll of a TCP connection waits on the connection's one abort signal; one
 * listener per wait made Node print `MaxListenersExceededWarning` (plain text on stderr) from the
 * 11th on (attack14b F6). Here 20 wait at once on one plain TCP connection, on one TLS
 * connection (with an API key: its waits share a signal combined with the key's), and 20 over
 * HTTP, and the broker's stderr must hold nothing but JSON lines.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { type FetchResponse, TcpClient } from "../../src/client/client.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";
import { offlineAdminKey } from "./helpers.ts";
import { makePki } from "./pki.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

const concurrent = 20;
const waitMs = 300;

/** `concurrent` long-polls at the end of `topic`/0 at once on `client`; each must come back empty after waiting. */
async function longPolls(client: TcpClient, topic: string): Promise<void> {
  const startedAt = performance.now();
  const answers: FetchResponse[] = await Promise.all(
    Array.from({ length: concurrent }, () =>
      client.fetch({ topic, partition: 0, offset: 0, waitMs }),
    ),
  );
  // They did wait (a fetch answered at once would prove nothing about waits in flight).
  expect(performance.now() - startedAt).toBeGreaterThanOrEqual(waitMs - 50);
  expect(answers.map((a) => a.records.length)).toEqual(Array(concurrent).fill(0));
}

/** Stops `broker` and asserts that everything it wrote to stderr is JSON lines, naming the first line that is not. */
async function expectJsonLog(broker: BrokerProcess): Promise<void> {
  await broker.stop("SIGTERM");
  const lines = broker
    .stderr()
    .split("\n")
    .filter((l) => l !== "");
  expect(lines.length).toBeGreaterThan(0);
  const notJson = lines.filter((l) => {
    try {
      return typeof JSON.parse(l) !== "object";
    } catch {
      return true;
    }
  });
  expect(notJson).toEqual([]);
  expect(broker.stderr()).not.toContain("MaxListenersExceededWarning");
}

describe(`long-polls in flight keep the log JSON lines [${target}]`, () => {
  it(`${concurrent} on one TCP connection and ${concurrent} over HTTP`, async () => {
    const { dir } = tempDir();
    const broker = await startBroker(join(dir, "data"));
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => client.close());
    await client.createTopic({ name: "lp", partitions: 1 });
    await longPolls(client, "lp");
    // Twice: the first round's waits left nothing behind on the connection's signal.
    await longPolls(client, "lp");
    const url = `${broker.httpUrl}/v1/topics/lp/partitions/0/records?offset=0&wait_ms=${waitMs}`;
    const answers = await Promise.all(
      Array.from({ length: concurrent }, async () => {
        const res = await fetch(url);
        return { status: res.status, body: (await res.json()) as { records: unknown[] } };
      }),
    );
    expect(answers.map((a) => [a.status, a.body.records.length])).toEqual(
      Array(concurrent).fill([200, 0]),
    );
    await client.close();
    await expectJsonLog(broker);
  });

  it(`${concurrent} on one TLS connection with an API key`, async () => {
    const pki = makePki();
    const dataDir = join(pki.dir, "data");
    const admin = await offlineAdminKey(dataDir, pki.dir);
    const broker = await startBroker(dataDir, [
      ...["--tls-cert", pki.server.cert, "--tls-key", pki.server.key],
    ]);
    running.push(broker);
    const client = await TcpClient.connect({
      ...broker.tcp,
      tls: { ca: readFileSync(pki.ca) },
      apiKey: admin.key,
    });
    onTestFinished(() => client.close());
    await client.createTopic({ name: "lp", partitions: 1 });
    await longPolls(client, "lp");
    await client.close();
    await expectJsonLog(broker);
  });
});
