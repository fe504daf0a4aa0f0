/**
 * The public conformance suite of the Durable Streams protocol (`@durable-streams/server-conformance-tests`,
 * pinned to 0.3.6 in package.json) against the real es-broker process of this target: every test of
 * the suite is a test of this file. Tests the suite skips by its own switch (the reserved
 * subscription APIs, `subscriptions: false`) show as skipped; every test that does not pass is
 * listed, with its reason, in docs/durable-streams.md "Conformance".
 *
 * The broker runs with a 500 ms long-poll timeout (as the reference server's own conformance run)
 * so the suite's long-poll timeouts take half a second, not thirty.
 *
 * `npm test` runs the suite on the node target only: on each other target it adds 35 s to a run
 * that is already near 15 minutes on this 2-vCPU machine. `ES_BROKER_STREAMS_CONFORMANCE=all`
 * runs it on every target (all pass the same 332; docs/durable-streams.md "Conformance").
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runConformanceTests } from "@durable-streams/server-conformance-tests";
import { afterAll, beforeAll, describe } from "vitest";
import { type BrokerProcess, startBroker, target } from "./harness.ts";

const runsHere = target === "node" || process.env.ES_BROKER_STREAMS_CONFORMANCE === "all";

describe.runIf(runsHere)(`[${target}] Durable Streams conformance suite 0.3.6`, () => {
  const config = { baseUrl: "", longPollTimeoutMs: 2_000 };
  let broker: BrokerProcess | undefined;
  let dir = "";

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "es-broker-ds-conformance-"));
    broker = await startBroker(join(dir, "data"), ["--stream-long-poll-ms", "500"]);
    config.baseUrl = broker.httpUrl;
  });

  afterAll(async () => {
    await broker?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  runConformanceTests(config);
});
