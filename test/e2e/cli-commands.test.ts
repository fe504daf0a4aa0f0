/**
 * End-to-end: the CLI's own logic through the real process — what `--help` lists, option errors,
 * a topic that does not exist, `consume --offset` past the high watermark, `topics describe` and
 * `groups describe` against the HTTP API's JSON, `groups list`, and the next producer epoch, from
 * the broker, for each run of `produce --producer-id`. The same code on every runtime, so on the node target only
 * (targets.ts `nodeOnlyE2eFiles`); what the CLI does through the runtime (signals, stdin, exit
 * codes, listen and file errors) is in cli.test.ts, on every target.
 */
import { type AddressInfo, createServer } from "node:net";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { tempDir } from "../helpers/tmp.ts";
import { runCli, startBroker, target, type BrokerProcess } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

function fresh(): string {
  return tempDir().dir;
}

/** A broker, a client of it, and a topic "t" with one partition. */
async function brokerWithTopic(): Promise<{ client: TcpClient; address: string }> {
  const broker = await startBroker(`${fresh()}/data`);
  running.push(broker);
  const client = await TcpClient.connect(broker.tcp);
  onTestFinished(() => void client.close());
  await client.createTopic({ name: "t", partitions: 1 });
  return { client, address: `${broker.tcp.host}:${broker.tcp.port}` };
}

async function values(client: TcpClient): Promise<string[]> {
  const r = await client.fetch({ topic: "t", partition: 0, offset: 0 });
  return r.records.map((rec) => new TextDecoder().decode(rec.value));
}

describe(`[${target}] es-broker commands`, () => {
  it("produce and consume of a topic that does not exist say how to create it, and exit 1", async () => {
    const { address } = await brokerWithTopic();
    const hint = (name: string) =>
      `es-broker: topic_not_found: Cannot find topic "${name}"\nes-broker: topics are not created on demand: create it first with es-broker topics create ${name} [--partitions N]\n`;
    const produced = await runCli(
      ["produce", "logs", "--broker", address],
      new TextEncoder().encode("x\n"),
    );
    expect(produced.code).toBe(1);
    expect(produced.stderr).toBe(hint("logs"));
    const consumed = await runCli(["consume", "logs", "--from-beginning", "--broker", address]);
    expect(consumed.code).toBe(1);
    expect(consumed.stderr).toBe(hint("logs"));
    // No hint to create what no topic can be called: a pattern, a name with "/".
    const pattern = await runCli(["consume", "clicks*", "--from-beginning", "--broker", address]);
    expect(pattern.code).toBe(1);
    expect(pattern.stderr).toBe(
      'es-broker: topic_not_found: Cannot find topic "clicks*"\nes-broker: consume reads one topic, named in full: topic patterns (wildcards) are not supported\n',
    );
    const slash = await runCli(
      ["produce", "a/b", "--broker", address],
      new TextEncoder().encode("x\n"),
    );
    expect(slash.code).toBe(1);
    expect(slash.stderr).toBe(
      'es-broker: topic_not_found: Cannot find topic "a/b"\nes-broker: no topic can have this name: Invalid topic name "a/b": only letters, digits, ".", "_" and "-" are allowed\n',
    );
  });

  it("a command against a broker that never answers fails after --timeout-ms and exits 1, not hanging on the open connection", async () => {
    const silent = createServer(() => {});
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    onTestFinished(() => {
      silent.close();
    });
    const port = (silent.address() as AddressInfo).port;
    for (const args of [
      ["topics", "list"],
      ["consume", "t", "--from-beginning"],
      ["cluster", "status"],
    ]) {
      const started = Date.now();
      const r = await runCli([...args, "--broker", `127.0.0.1:${port}`, "--timeout-ms", "300"]);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toMatch(/timeout: .*got no answer within 300 ms/);
      // Two tries of 300 ms, the exit grace (1 s), start-up: far below the 30 s default.
      expect(Date.now() - started).toBeLessThan(20_000);
    }
  });

  it("produce --producer-id run again at once gets the next epoch from the broker: the same line sent by three runs is stored three times", async () => {
    const { client, address } = await brokerWithTopic();
    const epochs: number[] = [];
    for (let run = 0; run < 3; run++) {
      // Identical batches: a run sharing its predecessor's epoch would be taken for its resend.
      const r = await runCli(
        ["produce", "t", "--broker", address, "--producer-id", "cron-job"],
        new TextEncoder().encode("heartbeat\n"),
      );
      expect(r.code, r.stderr).toBe(0);
      const epoch = /\(epoch (\d+), handed out by the broker\)/.exec(r.stderr);
      expect(epoch, r.stderr).not.toBeNull();
      epochs.push(Number(epoch![1]));
    }
    // stored + 1 each run (docs/decisions.md §20), with no wait for the clock's next second.
    expect(epochs).toEqual([epochs[0], epochs[0] + 1, epochs[0] + 2]);
    expect(await client.initProducerEpoch("cron-job")).toBe(epochs[0] + 3);
    expect(await values(client)).toEqual(["heartbeat", "heartbeat", "heartbeat"]);
  });

  it("produce --producer-id --max-in-flight pipelines a run's batches, each line stored once in order; a bound outside 1 … 5, or without --producer-id, is a usage error", async () => {
    const { client, address } = await brokerWithTopic();
    const lines = Array.from({ length: 50 }, (_, i) => `line-${i}`);
    const r = await runCli(
      [
        "produce",
        "t",
        "--broker",
        address,
        "--producer-id",
        "piped",
        "--max-in-flight",
        "4",
        "--batch-records",
        "5",
        "--partition",
        "0",
      ],
      new TextEncoder().encode(`${lines.join("\n")}\n`),
    );
    expect(r.code, r.stderr).toBe(0);
    expect(await values(client)).toEqual(lines);
    for (const args of [
      ["--producer-id", "x", "--max-in-flight", "6"],
      ["--producer-id", "x", "--max-in-flight", "0"],
      ["--max-in-flight", "2"],
    ]) {
      const bad = await runCli(["produce", "t", "--broker", address, ...args]);
      expect(bad.code, `${args.join(" ")}: ${bad.stderr}`).toBe(2);
      expect(bad.stderr).toMatch(/max-in-flight/);
    }
  });

  it("produce failing mid-input names the input line and says which lines were produced before it", async () => {
    const broker = await startBroker(`${fresh()}/data`);
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => void client.close());
    const schema = {
      type: "object",
      properties: { event: { type: "string" } },
      required: ["event"],
    };
    const registered = await fetch(`${broker.httpUrl}/registry/subjects/events-value/versions`, {
      method: "POST",
      headers: { "content-type": "application/vnd.schemaregistry.v1+json" },
      body: JSON.stringify({ schema: JSON.stringify(schema), schemaType: "JSON" }),
    });
    expect(registered.status, await registered.text()).toBe(200);
    await client.createTopic({
      name: "events",
      partitions: 1,
      config: { value_schema_subject: "events-value", schema_format: "json" },
    });
    // 1500 lines in batches of 1000: line 1200 (record 199 of the second batch) lacks "event".
    const lines = Array.from({ length: 1500 }, (_, i) =>
      i + 1 === 1200 ? '{"other":1}' : `{"event":"e${i + 1}"}`,
    );
    const r = await runCli(
      [
        "produce",
        "events",
        "--broker",
        `${broker.tcp.host}:${broker.tcp.port}`,
        "--linger-ms",
        "60000",
      ],
      new TextEncoder().encode(`${lines.join("\n")}\n`),
    );
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(
      /^es-broker: invalid_record: line 1200 of standard input: Cannot produce to topic "events": the line's value does not match subject "events-value"/,
    );
    expect(r.stderr).toMatch(
      /; nothing of its batch \(lines 1001–1500\) was appended; 1000 records \(lines 1–1000\) were produced before it, none from line 1001 on\n$/,
    );
    expect(r.stderr).not.toMatch(/record 199/);
    const last = await client.fetch({ topic: "events", partition: 0, offset: 999 });
    expect(last.highWatermark).toBe(1000);
    expect(new TextDecoder().decode(last.records[0].value)).toBe('{"event":"e1000"}');
  });

  it("es-broker --help lists every command with a one-line summary and points to each command's --help", async () => {
    const r = await runCli(["--help"]);
    expect(r.code, r.stderr).toBe(0);
    const help = r.stdout.toString();
    const listed = [...help.matchAll(/^ {2}([a-z]+) +(\S.*)$/gm)]
      .map((m) => m[1])
      .filter((name) => !name.startsWith("-"));
    // Written out here: a command the CLI dispatches but the help forgets fails this.
    const known = [
      "serve",
      "produce",
      "consume",
      "topics",
      "groups",
      "keys",
      "schemas",
      "check",
      "cluster",
    ];
    expect(listed.sort()).toEqual([...known].sort());
    expect(help).toContain("Run 'es-broker <command> --help' for a command's options");
    for (const command of known) {
      const own = await runCli([command, "--help"]);
      expect(own.code, `${command} --help: ${own.stderr}`).toBe(0);
      expect(own.stdout.toString()).toMatch(new RegExp(`^Usage: es-broker ${command}\\b`));
    }
  });

  it.each([
    [
      ["consume", "t", "--partition", "-1"],
      "--partition must be from 0 to 4095, got -1",
      "consume",
    ],
    [
      ["consume", "t", "--offset", "end"],
      '--offset must be an offset (an integer from 0), earliest, latest or -N (the last N records of each partition, N from 1), got "end"',
      "consume",
    ],
    [
      ["consume", "t", "--offset", "5"],
      "--offset N needs --partition (earliest, latest and -N apply to each partition)",
      "consume",
    ],
    [["consume", "t", "--nope"], "unknown option --nope", "consume"],
    [["produce", "t", "--partition"], "--partition needs a value", "produce"],
    [["consume", "t", "--follow=yes"], "--follow takes no value", "consume"],
    [["serve", "extra"], 'unexpected argument "extra"', "serve"],
    // An action that does not exist is an error also with --help (not the help of another action).
    [
      ["cluster", "elect-preferred", "--help"],
      'unknown cluster action "elect-preferred": the actions are status and elect --unclean (elect first, before any option; preferred leader election is an etcdctl put: docs/cluster.md "Preferred leader election")',
      "cluster",
    ],
    [
      ["topics", "nope", "--help"],
      'unknown topics action "nope" (create, list, describe, alter, delete)',
      "topics",
    ],
    [
      ["groups", "nope", "-h"],
      'unknown groups action "nope" (list, describe, reset-offsets)',
      "groups",
    ],
  ])(
    "%j says in one line what is wrong, naming the option, and exits 2",
    async (args, message, command) => {
      const r = await runCli(args);
      expect(r.code).toBe(2);
      expect(r.stderr).toBe(
        `es-broker: ${message}\nRun 'es-broker ${command} --help' for usage.\n`,
      );
    },
  );

  it("serve --help names only commands that exist: preferred leader election is an etcdctl put", async () => {
    const r = await runCli(["serve", "--help"]);
    expect(r.code).toBe(0);
    const help = r.stdout.toString();
    expect(help).not.toContain("elect-preferred");
    expect(help).toContain("etcdctl put /es-broker/elect_preferred");
    const status = await runCli(["cluster", "status", "--help"]);
    expect(status.code).toBe(0);
    expect(status.stdout.toString()).toContain("Usage: es-broker cluster status");
  });

  it("consume of every partition prints each record produced exactly once, in offset order per partition, over several fetches each", async () => {
    const broker = await startBroker(`${fresh()}/data`);
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => void client.close());
    const partitions = 4;
    await client.createTopic({ name: "many", partitions });
    // 600-byte values: a partition's 4 000 records take a few of consume's answers (max_bytes),
    // so partitions are read at once, each over several fetches.
    const perPartition = [4000, 2500, 4000, 1];
    const pad = "x".repeat(600);
    for (let p = 0; p < partitions; p++) {
      for (let i = 0; i < perPartition[p]; i += 500) {
        const batch = [];
        for (let j = i; j < Math.min(perPartition[p], i + 500); j++)
          batch.push({ key: `k${p}`, value: `p${p}-${j}-${pad}` });
        await client.produce("many", batch, { partition: p });
      }
    }
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    const r = await runCli([
      "consume",
      "many",
      "--from-beginning",
      "--key-separator",
      "=",
      "--broker",
      address,
    ]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.toString("utf8").split("\n");
    expect(lines.pop()).toBe("");
    expect(lines.length).toBe(perPartition.reduce((a, b) => a + b, 0));
    const next = new Array<number>(partitions).fill(0);
    for (const line of lines) {
      const m = /^k(\d+)=p(\d+)-(\d+)-(x*)$/.exec(line);
      expect(m, line.slice(0, 40)).not.toBeNull();
      const [, key, p, i, rest] = m!;
      expect(key).toBe(p);
      expect(rest.length).toBe(600);
      // Offset order within the partition, each record once: the next line of partition p is
      // record next[p], whatever the other partitions printed in between.
      expect(Number(i)).toBe(next[Number(p)]);
      next[Number(p)]++;
    }
    expect(next).toEqual(perPartition);
    // --max-records stops after exactly N records, over partitions read at once.
    const some = await runCli([
      "consume",
      "many",
      "--from-beginning",
      "--max-records",
      "4500",
      "--broker",
      address,
    ]);
    expect(some.code, some.stderr).toBe(0);
    expect(some.stdout.toString("utf8").split("\n").length - 1).toBe(4500);
  });

  it("consume --offset past the high watermark fails the same way with and without --follow, naming the offset and the high watermark", async () => {
    const { client, address } = await brokerWithTopic();
    await client.produce("t", [{ value: "a" }, { value: "b" }], { partition: 0 });
    const message =
      'es-broker: Cannot consume partition 0 of topic "t" from offset 99: it is past the high watermark 2 (give an offset from 0 to 2)\n';
    for (const follow of [[], ["--follow"]]) {
      const r = await runCli([
        "consume",
        "t",
        "--partition",
        "0",
        "--offset",
        "99",
        ...follow,
        "--broker",
        address,
      ]);
      expect(r.code, `${follow.join(" ")} ${r.stderr}`).toBe(1);
      expect(r.stderr).toBe(message);
      expect(r.stdout.length).toBe(0);
    }
    // At the high watermark is not past it: nothing to print yet, exit 0.
    const atEnd = await runCli([
      "consume",
      "t",
      "--partition",
      "0",
      "--offset",
      "2",
      "--broker",
      address,
    ]);
    expect(atEnd.code, atEnd.stderr).toBe(0);
  });

  it("topics describe and groups describe print the HTTP API's JSON for the same topic and group", async () => {
    const broker = await startBroker(`${fresh()}/data`);
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => void client.close());
    await client.createTopic({ name: "t", partitions: 2, config: { retention_ms: 60_000 } });
    await client.produce("t", [{ value: "x" }], { partition: 1 });
    const member = await client.joinGroup({ group: "g", topics: ["t"], sessionTimeoutMs: 30_000 });
    await client.commitOffsets({
      group: "g",
      memberId: member.memberId,
      generation: member.generation,
      offsets: [{ topic: "t", partition: 1, offset: 1 }],
    });
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    for (const [args, path] of [
      [["topics", "describe", "t"], "/v1/topics/t"],
      [["groups", "describe", "g"], "/v1/groups/g"],
    ] as const) {
      const cli = await runCli([...args, "--broker", address]);
      expect(cli.code, cli.stderr).toBe(0);
      const http = await (await fetch(`${broker.httpUrl}${path}`)).json();
      expect(JSON.parse(cli.stdout.toString()), args.join(" ")).toEqual(http);
    }
  });

  it("exit codes: a partition the topic does not have is a failure (1), a role with patterns it cannot take a usage error (2)", async () => {
    const broker = await startBroker(`${fresh()}/data`);
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => void client.close());
    await client.createTopic({ name: "clicks", partitions: 4 });
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    const consumed = await runCli([
      ...["consume", "clicks", "--partition", "9", "--from-beginning", "--broker", address],
    ]);
    expect(consumed.code, consumed.stderr).toBe(1);
    expect(consumed.stderr).toBe(
      'es-broker: Cannot consume partition 9 of topic "clicks": it has 4 partitions (0 to 3)\n',
    );
    const keyed = await runCli([
      ...["keys", "create", "--data-dir", `${fresh()}/data`, "--name", "ops"],
      ...["--role", "admin", "--topics", "x"],
    ]);
    expect(keyed.code, keyed.stderr).toBe(2);
    expect(keyed.stderr).toBe(
      "es-broker: Cannot create key \"ops\": an admin key takes no topic or group patterns (admin may use every topic and group)\nRun 'es-broker keys --help' for usage.\n",
    );
  });

  it("consume --offset earliest, latest and -N (the last N records of each partition) as kcat's -o", async () => {
    const broker = await startBroker(`${fresh()}/data`);
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => void client.close());
    await client.createTopic({ name: "t", partitions: 2 });
    await client.produce(
      "t",
      ["a0", "a1", "a2", "a3", "a4"].map((value) => ({ value })),
      {
        partition: 0,
      },
    );
    await client.produce(
      "t",
      ["b0", "b1", "b2"].map((value) => ({ value })),
      { partition: 1 },
    );
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    const consume = async (...args: string[]) => {
      const r = await runCli(["consume", "t", ...args, "--broker", address]);
      expect(r.code, `${args.join(" ")}: ${r.stderr}`).toBe(0);
      // Partitions interleave: compare the records as a set, each partition's in order.
      const lines = r.stdout
        .toString()
        .split("\n")
        .filter((l) => l !== "");
      const a = lines.filter((l) => l.startsWith("a"));
      const b = lines.filter((l) => l.startsWith("b"));
      return [...a, ...b];
    };
    expect(await consume("--offset", "-2")).toEqual(["a3", "a4", "b1", "b2"]);
    expect(await consume("--offset", "-4")).toEqual(["a1", "a2", "a3", "a4", "b0", "b1", "b2"]);
    expect(await consume("--offset", "earliest")).toEqual([
      ...["a0", "a1", "a2", "a3", "a4", "b0", "b1", "b2"],
    ]);
    expect(await consume("--offset", "latest")).toEqual([]);
    expect(await consume("--partition", "1", "--offset", "-1")).toEqual(["b2"]);
    expect(await consume("--partition", "0", "--offset", "3")).toEqual(["a3", "a4"]);
    const both = await runCli(["consume", "t", "--offset", "-1", "--from-beginning"]);
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("give --offset or --from-beginning, not both");
  });

  it("schemas with --broker says the registry is reached over HTTP with --registry; an unreachable registry names --registry", async () => {
    const withBroker = await runCli(["schemas", "list", "--broker", "127.0.0.1:9092"]);
    expect(withBroker.code).toBe(2);
    expect(withBroker.stderr).toBe(
      "es-broker: schemas talks to the broker's schema registry over HTTP, not to its TCP port: give --registry http(s)://127.0.0.1:HTTP_PORT/registry (the broker's --http-port, default 8080; https:// when the broker serves TLS) instead of --broker 127.0.0.1:9092\nRun 'es-broker schemas --help' for usage.\n",
    );
    // A port in this file's range that nothing listens on.
    const url = "http://127.0.0.1:28499/registry";
    const refused = await runCli(["schemas", "list", "--registry", url]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /^es-broker: cannot reach the registry at http:\/\/127\.0\.0\.1:28499\/registry: .*ECONNREFUSED.* \(check --registry: the broker serves its registry at \/registry on its HTTP port\)\n$/,
    );
  });

  it("topics alter changes config keys through the HTTP API and prints the topic; topics describe takes --json", async () => {
    const broker = await startBroker(`${fresh()}/data`);
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => void client.close());
    await client.createTopic({ name: "orders", partitions: 2, config: { retention_ms: 60_000 } });
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    const altered = await runCli([
      ...["topics", "alter", "orders", "--config", "retention_ms=1000", "--url", broker.httpUrl],
    ]);
    expect(altered.code, altered.stderr).toBe(0);
    const http = (await (await fetch(`${broker.httpUrl}/v1/topics/orders`)).json()) as {
      config: { retention_ms: number };
    };
    expect(http.config.retention_ms).toBe(1000);
    expect(JSON.parse(altered.stdout.toString())).toEqual(http);
    // true / false / null are JSON's, as the HTTP API takes them (newuser17 F1: "true" was sent
    // as a string and refused); null removes an optional key.
    for (const [value, expected] of [
      ["true", true],
      ["false", false],
      ["null", undefined],
    ] as const) {
      const set = await runCli([
        ...["topics", "alter", "orders", "--config", `mirror_hold_retention=${value}`],
        ...["--url", broker.httpUrl],
      ]);
      expect(set.code, set.stderr).toBe(0);
      const after = JSON.parse(set.stdout.toString()) as { config: Record<string, unknown> };
      expect(after.config.mirror_hold_retention).toBe(expected);
    }
    const described = await runCli(["topics", "describe", "orders", "--json", "--broker", address]);
    expect(described.code, described.stderr).toBe(0);
    expect(JSON.parse(described.stdout.toString())).toEqual(http);
    // The broker's refusal: exit 1 with its code and message.
    const refused = await runCli([
      ...["topics", "alter", "orders", "--config", "retention_ms=-5", "--url", broker.httpUrl],
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/^es-broker: invalid_config: .*retention_ms/);
    for (const [args, message] of [
      [
        ["topics", "alter", "orders", "--url", broker.httpUrl],
        "topics alter needs at least one --config key=value",
      ],
      [
        ["topics", "alter", "orders", "--config", "retention_ms=1", "--broker", address],
        `topics alter speaks the broker's HTTP API: give --url http(s)://127.0.0.1:HTTP_PORT (the broker's --http-port, default 8080; https:// when the broker serves TLS) instead of --broker ${address}`,
      ],
      // TLS options given: the broker serves TLS, on its HTTP port too (newuser report 8).
      [
        [
          ...["topics", "alter", "orders", "--config", "retention_ms=1"],
          ...["--broker", "broker1.internal:9093", "--tls-ca", "/nonexistent/ca.pem"],
        ],
        "topics alter speaks the broker's HTTP API: give --url https://broker1.internal:HTTP_PORT (the broker's --http-port, default 8080) instead of --broker broker1.internal:9093",
      ],
      // Kafka's option names get es-broker's equivalent.
      [
        ["topics", "create", "t5", "--partitions", "2", "--replication-factor", "2"],
        "unknown option --replication-factor (Kafka's tools take it; es-broker takes --config replication_factor=2)",
      ],
      [
        ["topics", "list", "--json"],
        "--json goes with topics describe (the other actions print one format)",
      ],
    ] as const) {
      const r = await runCli([...args]);
      expect(r.code, args.join(" ")).toBe(2);
      expect(r.stderr).toBe(`es-broker: ${message}\nRun 'es-broker topics --help' for usage.\n`);
    }
  });

  it("groups list counts members in the right number", async () => {
    const { client, address } = await brokerWithTopic();
    await client.joinGroup({ group: "solo", topics: ["t"], sessionTimeoutMs: 60_000 });
    const r = await runCli(["groups", "list", "--broker", address]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout.toString()).toBe("solo\tgeneration 1\t1 member\n");
  });
});
