/**
 * End-to-end: what the command line says when it cannot do what it was asked (the real process,
 * so on every runtime target): one short line on stderr naming the problem, and the exit code.
 * This file keeps what touches the runtime — signals, stdin read as it arrives, listen and file
 * errors, exit codes; the CLI's own logic (help, option errors, describe output, producer epochs)
 * is in cli-commands.test.ts, on the node target only (targets.ts).
 */
import { afterEach, describe, onTestFinished, expect, it } from "vitest";
import { spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { createServer, type AddressInfo, type Socket } from "node:net";
import { TcpClient } from "../../src/client/client.ts";
import { tempDir } from "../helpers/tmp.ts";
import { freePorts } from "../helpers/ports.ts";
import {
  assertTargetRunnable,
  brokerCommand,
  runCli,
  startBroker,
  target,
  type BrokerProcess,
} from "./harness.ts";
import { waitFor } from "./helpers.ts";
import { makePki } from "./pki.ts";
import { repoRoot } from "./targets.ts";

const running: BrokerProcess[] = [];
const children: ChildProcess[] = [];
afterEach(async () => {
  for (const c of children.splice(0))
    if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** A broker, a client of it, and a topic "t" with one partition. */
async function brokerWithTopic(): Promise<{ client: TcpClient; address: string }> {
  const broker = await startBroker(`${fresh()}/data`);
  running.push(broker);
  const client = await TcpClient.connect(broker.tcp);
  onTestFinished(() => void client.close());
  await client.createTopic({ name: "t", partitions: 1 });
  return { client, address: `${broker.tcp.host}:${broker.tcp.port}` };
}

/** A CLI process the test talks to: stdin a pipe, stdout and stderr collected. */
interface Command {
  proc: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  /** The exit code; a process a signal ended (no code) resolves as 128 + the signal's number. */
  exited: Promise<number | null>;
}

/**
 * Starts `es-broker ...args`; with `sigintIgnored`, as bash starts a script's background job:
 * SIGINT set to ignored, then exec (the same process).
 */
function startCommand(args: string[], options: { sigintIgnored?: boolean } = {}): Command {
  assertTargetRunnable();
  const [cmd, ...pre] = brokerCommand();
  const stdio: ("pipe" | "ignore")[] = ["pipe", "pipe", "pipe"];
  const proc = options.sigintIgnored
    ? spawn("bash", ["-c", `trap '' INT; exec "$@"`, "bash", cmd, ...pre, ...args], {
        cwd: repoRoot,
        stdio,
      })
    : spawn(cmd, [...pre, ...args], { cwd: repoRoot, stdio });
  children.push(proc);
  let out = "";
  let err = "";
  proc.stdout!.on("data", (d) => (out += d));
  proc.stderr!.on("data", (d) => (err += d));
  const exited = new Promise<number | null>((resolve) =>
    proc.once("close", (code, signal) =>
      resolve(code ?? (signal === "SIGINT" ? 130 : signal === "SIGTERM" ? 143 : null)),
    ),
  );
  return { proc, stdout: () => out, stderr: () => err, exited };
}

/** Starts `es-broker produce ...args` with stdin a pipe the test writes to. */
function startProduce(args: string[]): Command {
  return startCommand(["produce", ...args]);
}

async function values(client: TcpClient): Promise<string[]> {
  const r = await client.fetch({ topic: "t", partition: 0, offset: 0 });
  return r.records.map((rec) => new TextDecoder().decode(rec.value));
}

function fresh(): string {
  const t = tempDir();
  return t.dir;
}

describe(`[${target}] es-broker command line errors`, () => {
  it("serve --data-dir naming a file says it is not a directory, once, and exits 1", async () => {
    const dir = fresh();
    writeFileSync(`${dir}/README.md`, "not a data directory\n");
    const r = await runCli([
      "serve",
      "--data-dir",
      `${dir}/README.md`,
      "--http-port",
      "0",
      "--tcp-port",
      "0",
    ]);
    expect(r.code).toBe(1);
    expect(r.stderr).toBe(
      `es-broker: Cannot use data directory ${dir}/README.md: it is not a directory\n`,
    );
  });

  it("serve start-up errors say what is wrong: swapped TLS files, a data directory it cannot create, one port for two listeners", async () => {
    const pki = makePki();
    const dataDir = `${fresh()}/data`;
    const swapped = await runCli([
      "serve",
      "--data-dir",
      dataDir,
      "--http-port",
      "0",
      "--tcp-port",
      "0",
      "--tls-cert",
      pki.server.key,
      "--tls-key",
      pki.server.cert,
    ]);
    expect(swapped.code).toBe(1);
    expect(swapped.stderr).toContain(
      `es-broker: Cannot use --tls-cert ${pki.server.key} with --tls-key ${pki.server.cert}: the --tls-cert file holds no certificate but a private key: are --tls-cert and --tls-key swapped?\n`,
    );
    const proc = await runCli([
      "serve",
      "--data-dir",
      "/proc/nope",
      "--http-port",
      "0",
      "--tcp-port",
      "0",
    ]);
    expect(proc.code).toBe(1);
    expect(proc.stderr).toMatch(
      /^es-broker: Cannot create the data directory \/proc\/nope: ENOENT/,
    );
    const shared = await runCli([
      "serve",
      "--data-dir",
      dataDir,
      "--http-port",
      "28701",
      "--tcp-port",
      "28701",
    ]);
    expect(shared.code).toBe(2);
    expect(shared.stderr).toContain(
      "es-broker: --http-port 28701 and --tcp-port 28701 name the same port: give each listener its own port (0 = any free port)\n",
    );
  }, 120_000);

  it("serve on a port another process holds names the listener, the address and the option, exits 1 and leaves the data directory free", async () => {
    const holder = createServer();
    await new Promise<void>((res) => holder.listen(0, "127.0.0.1", res));
    onTestFinished(() => void holder.close());
    const held = (holder.address() as AddressInfo).port;
    const dataDir = `${fresh()}/data`;
    for (const [option, listener, other] of [
      ["--http-port", "HTTP", "--tcp-port"],
      ["--tcp-port", "TCP", "--http-port"],
    ]) {
      const r = await runCli(["serve", "--data-dir", dataDir, option, String(held), other, "0"]);
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toContain(
        `es-broker: Cannot listen for ${listener} on 127.0.0.1:${held}: the address is in use (another es-broker, or another program, holds the port); stop that process, or pick another port with ${option} PORT (0 = any free port)\n`,
      );
    }
    // The failed starts released data/broker.lock: the next start on the directory serves.
    const broker = await startBroker(dataDir);
    running.push(broker);
    expect((await fetch(`${broker.httpUrl}/healthz`)).status).toBe(200);
  });

  it("produce sends lines as they arrive (after --linger-ms), long before stdin closes", async () => {
    const { client, address } = await brokerWithTopic();
    const p = startProduce(["t", "--broker", address]);
    p.proc.stdin!.write("one\ntwo\n");
    await waitFor(
      "the first two lines to be stored while stdin is open",
      async () => (await client.listOffsets({ topic: "t", partition: 0 })).highWatermark === 2,
    );
    p.proc.stdin!.write("three\n");
    await waitFor(
      "the third line to be stored while stdin is open",
      async () => (await client.listOffsets({ topic: "t", partition: 0 })).highWatermark === 3,
    );
    p.proc.stdin!.end();
    expect(await p.exited, p.stderr()).toBe(0);
    expect(p.stderr()).toBe('es-broker: produced 3 records to "t"\n');
    expect(await values(client)).toEqual(["one", "two", "three"]);
  });

  it("produce on SIGINT sends the lines it has read, waits for their acknowledgement and says how many", async () => {
    const { client, address } = await brokerWithTopic();
    // A linger far longer than the test: only the signal can send these lines.
    const p = startProduce(["t", "--broker", address, "--linger-ms", "3600000"]);
    // A signal before the process has installed its handlers would end it (130), and it reads
    // stdin only after: a first line longer than a pipe holds (64 KiB) is written out only once
    // the process reads, however long it took to start on a loaded machine.
    const first = "f".repeat(256 * 1024);
    await new Promise<void>((resolve, reject) =>
      p.proc.stdin!.write(`${first}\n`, (err) => (err ? reject(err) : resolve())),
    );
    p.proc.stdin!.write("a\nb\nc\npartial");
    // Give the running process time to read these too (nothing is asserted about the time).
    await new Promise((r) => setTimeout(r, 1500));
    expect((await client.listOffsets({ topic: "t", partition: 0 })).highWatermark).toBe(0);
    p.proc.kill("SIGINT");
    expect(await p.exited, p.stderr()).toBe(0);
    expect(p.stderr()).toBe(
      'es-broker: SIGINT: not sending an incomplete last line (7 bytes without a newline)\nes-broker: SIGINT: stopped reading; produced 4 records to "t"\n',
    );
    expect(await values(client)).toEqual([first, "a", "b", "c"]);
  });

  it("consume --follow, with and without --group, exits 0 on SIGINT or SIGTERM with every record it received printed", async () => {
    const { client, address } = await brokerWithTopic();
    const cases: [string[], "SIGINT" | "SIGTERM"][] = [
      [[], "SIGINT"],
      [[], "SIGTERM"],
      [["--group", "g"], "SIGINT"],
      [["--group", "g"], "SIGTERM"],
    ];
    for (const [extra, signal] of cases) {
      const what = `consume --follow ${extra.join(" ")} on ${signal}`;
      const c = startCommand(["consume", "t", "--follow", "--broker", address, ...extra]);
      // It starts at the end of the log: produce until it has printed a record (it is then
      // long-polling for more), then once more so that the last record is in its hands.
      for (let i = 0; !c.stdout().includes(`${signal}-`); i++) {
        if (i > 100) throw new Error(`[${target}] ${what} printed nothing: ${c.stderr()}`);
        await client.produce("t", [{ value: `${signal}-${i}` }]);
        await new Promise((r) => setTimeout(r, 100));
      }
      const last = `${signal}-last`;
      await client.produce("t", [{ value: last }]);
      await waitFor(`${what} to print the last record`, () => c.stdout().includes(last));
      c.proc.kill(signal);
      expect(await c.exited, `${what}: ${c.stderr()}`).toBe(0);
      expect(c.stderr(), what).toBe("");
      expect(c.stdout().endsWith(`${last}\n`), what).toBe(true);
    }
    // The group member committed what it printed and left.
    const group = await client.describeGroup("g");
    expect(group.members).toEqual([]);
    expect(group.offsets[0].lag).toBe(0);
  });

  it("consume into a pipe whose reader goes away (| head) stops quietly with 0; with --group it commits only what the pipe took and leaves", async () => {
    const { client, address } = await brokerWithTopic();
    // 2 MB of records, far more than a pipe holds (64 KiB), so the reader leaves long before the end.
    const total = 20_000;
    const recordBytes = 100;
    const line = (i: number) => `r${i}`.padEnd(recordBytes - 1, ".");
    for (let i = 0; i < total; i += 1000)
      await client.produce(
        "t",
        Array.from({ length: 1000 }, (_, j) => ({ value: line(i + j) })),
      );
    for (const extra of [[], ["--group", "g"]]) {
      const what = `consume --from-beginning ${extra.join(" ")}`;
      const c = startCommand(["consume", "t", "--from-beginning", "--broker", address, ...extra]);
      // The reader takes what it has got and closes its end of the pipe, as head does.
      await waitFor(`${what} to print`, () => c.stdout().includes("\n"));
      c.proc.stdout!.destroy();
      const received = c.stdout();
      expect(await c.exited, `${what}: ${c.stderr()}`).toBe(0);
      expect(c.stderr(), what).toBe("");
      expect(received.startsWith(`${line(0)}\n`), what).toBe(true);
      if (extra.length === 0) continue;
      const group = await client.describeGroup("g");
      expect(group.members, "the member left the group").toEqual([]);
      const committed = group.offsets[0].committed ?? 0;
      // Every record the reader got was written, so committed; nothing beyond what the pipe
      // could still hold when the reader left was.
      expect(committed).toBeGreaterThanOrEqual(received.split("\n").length - 1);
      expect(committed * recordBytes).toBeLessThanOrEqual(received.length + 1024 * 1024);
      expect(committed).toBeLessThan(total);
      // The next run starts right after the last committed record.
      const next = await runCli([
        "consume",
        "t",
        "--group",
        "g",
        "--max-records",
        "1",
        "--broker",
        address,
      ]);
      expect(next.code, next.stderr).toBe(0);
      expect(next.stdout.toString()).toBe(`${line(committed)}\n`);
    }
  });

  it("a second signal abandons a stop in progress: produce waiting for acknowledgements exits 143 on a second SIGTERM", async () => {
    const broker = await startBroker(`${fresh()}/data`);
    running.push(broker);
    const client = await TcpClient.connect(broker.tcp);
    await client.createTopic({ name: "t", partitions: 1 });
    const p = startProduce(["t", "--broker", `${broker.tcp.host}:${broker.tcp.port}`]);
    p.proc.stdin!.write("a\n");
    // Stored: the process reads stdin, so its signal handlers are in place.
    await waitFor(
      "the first line to be stored",
      async () => (await client.listOffsets({ topic: "t", partition: 0 })).highWatermark === 1,
    );
    await client.close();
    // A stopped broker never acknowledges the lines the first signal sends.
    broker.proc.kill("SIGSTOP");
    onTestFinished(() => void broker.proc.kill("SIGCONT"));
    p.proc.stdin!.write("b\n");
    await new Promise((r) => setTimeout(r, 500)); // past --linger-ms: "b" is sent, unanswered
    p.proc.kill("SIGINT");
    await new Promise((r) => setTimeout(r, 500));
    expect(p.proc.exitCode, p.stderr()).toBe(null);
    p.proc.kill("SIGTERM");
    expect(await p.exited, p.stderr()).toBe(143);
    expect(p.stderr()).toContain("es-broker: second SIGTERM, exiting now\n");
  });

  it("produce refuses a line over 8 MiB naming the line, before reading all of it", async () => {
    const { client, address } = await brokerWithTopic();
    const p = startProduce(["t", "--broker", address]);
    p.proc.stdin!.on("error", () => {}); // EPIPE: the process stops reading once it has refused the line
    p.proc.stdin!.write("ok\n");
    // 9 MiB without a newline: the line is refused before it ends (stdin stays open).
    p.proc.stdin!.write(new Uint8Array(9 * 1024 * 1024).fill(0x61));
    expect(await p.exited, p.stderr()).toBe(1);
    expect(p.stderr()).toMatch(
      /^es-broker: line 2 of standard input is at least \d+ bytes, over the limit of 8388608 bytes \(8 MiB\) for one record's key and value\n$/,
    );
    expect(
      (await client.listOffsets({ topic: "t", partition: 0 })).highWatermark,
    ).toBeLessThanOrEqual(1);
  });

  it("a one-shot command ends at once on SIGINT with 130, also when it inherited SIGINT ignored (a script's background job)", async () => {
    // A broker that accepts and never answers keeps `topics list` waiting for its answer.
    const sockets: Socket[] = [];
    const silent = createServer((socket) => sockets.push(socket));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    onTestFinished(() => {
      for (const s of sockets) s.destroy();
      silent.close();
    });
    const address = `127.0.0.1:${(silent.address() as AddressInfo).port}`;
    for (const inheritedIgnored of [false, true]) {
      const args = ["topics", "list", "--broker", address];
      const cmd = startCommand(args, { sigintIgnored: inheritedIgnored });
      const connected = sockets.length + 1;
      await waitFor("the command's connection", () => sockets.length >= connected, 20_000);
      cmd.proc.kill("SIGINT");
      const code = await Promise.race([
        cmd.exited,
        new Promise<string>((r) => setTimeout(() => r("still running 5 s after SIGINT"), 5000)),
      ]);
      expect(code, `inherited ignored: ${inheritedIgnored}; stderr: ${cmd.stderr()}`).toBe(130);
    }
  });

  it("consume --follow (plain and --group) and plain produce ride through a broker restart: every line stored and printed exactly once, in order", async () => {
    const dataDir = `${fresh()}/data`;
    // The restarted broker must listen where the commands reconnect: two free ports, reserved
    // for this process (test/helpers/ports.ts), so neither another target's run of this file nor
    // another checkout's takes them meanwhile.
    const [http, tcp] = await freePorts(2);
    const ports = ["--http-port", String(http), "--tcp-port", String(tcp)];
    let broker = await startBroker(dataDir, ports);
    running.push(broker);
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    const admin = await TcpClient.connect(broker.tcp);
    await admin.createTopic({ name: "t", partitions: 1 });
    await admin.close();
    const follow = ["t", "--follow", "--from-beginning", "--broker", address];
    const plain = startCommand(["consume", ...follow]);
    const grouped = startCommand(["consume", ...follow, "--group", "g"]);
    const p = startProduce(["t", "--broker", address, "--linger-ms", "0"]);
    const printedBoth = (line: string) =>
      plain.stdout().includes(`${line}\n`) && grouped.stdout().includes(`${line}\n`);
    const send = async (from: number, to: number) => {
      for (let i = from; i <= to; i++) p.proc.stdin!.write(`line-${i}\n`);
    };
    await send(1, 3);
    await waitFor("both consumers to print line-3", () => printedBoth("line-3"));
    expect(await broker.stop("SIGTERM")).toBe(0);
    // Read while the broker is down: sent once it is back.
    await send(4, 6);
    await new Promise((r) => setTimeout(r, 500));
    broker = await startBroker(dataDir, ports);
    running.push(broker);
    await waitFor("both consumers to print line-6 after the restart", () => printedBoth("line-6"));
    await send(7, 8);
    p.proc.stdin!.end();
    expect(await p.exited, p.stderr()).toBe(0);
    await waitFor("both consumers to print line-8", () => printedBoth("line-8"));
    const expected = Array.from({ length: 8 }, (_, i) => `line-${i + 1}\n`).join("");
    for (const [what, c] of [
      ["produce", p],
      ["consume", plain],
      ["consume --group", grouped],
    ] as const) {
      expect(c.stderr(), what).toMatch(
        /es-broker: connection to the broker lost \(.*\): reconnecting (until stopped|for up to 30000 ms) \(--reconnect-timeout-ms\)\n(.*\n)*es-broker: reconnected after \d+ ms\n/,
      );
    }
    expect(p.stderr()).toContain('es-broker: produced 8 records to "t"\n');
    plain.proc.kill("SIGTERM");
    grouped.proc.kill("SIGTERM");
    expect(await plain.exited, plain.stderr()).toBe(0);
    expect(await grouped.exited, grouped.stderr()).toBe(0);
    expect(plain.stdout()).toBe(expected);
    expect(grouped.stdout()).toBe(expected);
    const client = await TcpClient.connect(broker.tcp);
    onTestFinished(() => void client.close());
    expect(await values(client)).toEqual(expected.trimEnd().split("\n"));
    const group = await client.describeGroup("g");
    expect(group.offsets[0].committed).toBe(8);
  });

  it("produce and consume with a --broker list none of which answers fail at once naming every address and why (attack13 F7)", async () => {
    // Three ports nothing listens on any more: each connect is refused.
    const ports = await Promise.all(
      [0, 1, 2].map(
        () =>
          new Promise<number>((resolve) => {
            const server = createServer();
            server.listen(0, "127.0.0.1", () => {
              const { port } = server.address() as AddressInfo;
              server.close(() => resolve(port));
            });
          }),
      ),
    );
    const list = ports.map((p) => `127.0.0.1:${p}`);
    const named = new RegExp(
      `^es-broker: connection_closed: Cannot connect: none of 3 bootstrap brokers answered: ${list
        .map((a) => `${a.replaceAll(".", "\\.")} \\([^)]*ECONNREFUSED[^)]*\\)`)
        .join(", ")}\n$`,
    );
    for (const args of [
      ["produce", "t"],
      ["consume", "t", "--follow"],
    ]) {
      const r = await runCli(
        [...args, "--broker", list.join(",")],
        new TextEncoder().encode("x\n"),
      );
      expect(r.code, r.stderr).toBe(1);
      // The first connect is not retried (--help and README say so): no "reconnecting" line.
      expect(r.stderr).toMatch(named);
    }
    // One address: its own error, as before.
    const one = await runCli(
      ["produce", "t", "--broker", list[0]],
      new TextEncoder().encode("x\n"),
    );
    expect(one.code).toBe(1);
    expect(one.stderr).toMatch(
      /^es-broker: connection_closed: Cannot connect to 127\.0\.0\.1:\d+: .*ECONNREFUSED/,
    );
    // The help says the first connect is not retried.
    for (const command of ["produce", "consume"]) {
      const help = await runCli([command, "--help"]);
      expect(help.stdout.toString().replace(/\s+/g, " ")).toContain(
        "the first connect is not retried",
      );
    }
  });

  // Twenty-odd CLI runs, each a start of the runtime (19 s of serial time on Deno): the plan and
  // its refusals are the CLI's JavaScript, the same on every runtime; committing through the CLI
  // runs on every target in the `consume --group` cases above.
  it.runIf(target === "node")(
    "groups reset-offsets prints the offsets, commits them only with --execute, and only while the group has no members",
    async () => {
      const { client, address } = await brokerWithTopic();
      await client.produce(
        "t",
        Array.from({ length: 10 }, (_, i) => ({ value: `v${i}` })),
      );
      const consumed = await runCli([
        "consume",
        "t",
        "--group",
        "g",
        "--from-beginning",
        "--max-records",
        "4",
        "--broker",
        address,
      ]);
      expect(consumed.code, consumed.stderr).toBe(0);
      const committed = async () => (await client.describeGroup("g")).offsets[0].committed;
      expect(await committed()).toBe(4);
      const reset = (...args: string[]) =>
        runCli(["groups", "reset-offsets", "g", "--topic", "t", "--broker", address, ...args]);

      const dry = await reset("--to", "earliest");
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.stdout.toString()).toBe("g\tt\t0\t0\n");
      expect(dry.stderr).toMatch(/dry run: nothing was committed; add --execute/);
      expect(dry.stderr).not.toContain("live member");
      expect(await committed()).toBe(4);

      for (const [to, offset] of [
        ["earliest", 0],
        ["latest", 10],
        ["7", 7],
      ] as const) {
        const done = await reset("--to", to, "--partition", "0", "--execute");
        expect(done.code, done.stderr).toBe(0);
        expect(done.stdout.toString()).toBe(`g\tt\t0\t${offset}\n`);
        expect(done.stderr).toBe("");
        expect(await committed()).toBe(offset);
      }
      const next = await runCli([
        "consume",
        "t",
        "--group",
        "g",
        "--max-records",
        "1",
        "--broker",
        address,
      ]);
      expect(next.stdout.toString()).toBe("v7\n");

      // Committed 8 now (7, then the one consume above). --shift-by moves it, clamped to
      // [log start 0, high watermark 10]; --to -N is N before the high watermark (consume's -N).
      expect(await committed()).toBe(8);
      for (const [args, offset] of [
        [["--shift-by", "-3"], 5],
        [["--shift-by", "+2"], 7],
        [["--shift-by", "100"], 10],
        [["--shift-by", "-100"], 0],
        [["--to", "-4"], 6],
        [["--to", "-40"], 0],
      ] as const) {
        const done = await reset(...args, "--execute");
        expect(done.code, done.stderr).toBe(0);
        expect(done.stdout.toString()).toBe(`g\tt\t0\t${offset}\n`);
        expect(await committed()).toBe(offset);
      }
      // The refusals commit nothing (checked after them): one process each, all at once.
      const [both, badShift, noCommit, beyond, bad, noPartition] = await Promise.all([
        reset("--to", "latest", "--shift-by", "1"),
        reset("--shift-by", "1.5"),
        runCli([
          "groups",
          "reset-offsets",
          "fresh",
          "--topic",
          "t",
          "--shift-by",
          "1",
          "--broker",
          address,
        ]),
        reset("--to", "99", "--execute"),
        reset("--to", "yesterday"),
        reset("--to", "earliest", "--partition", "3"),
      ]);
      expect(both.code).toBe(2);
      expect(both.stderr).toMatch(/give one of --to, --shift-by, not several/);
      expect(badShift.code).toBe(2);
      expect(badShift.stderr).toMatch(/--shift-by "1.5": give a whole number of records/);
      expect(noCommit.code).toBe(1);
      expect(noCommit.stderr).toMatch(/group_not_found/);
      expect(beyond.code).toBe(1);
      expect(beyond.stderr).toMatch(/invalid_offset/);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(
        /--to "yesterday": give earliest, latest, an offset \(a whole number ≥ 0\) or -N .*use --shift-by -N/,
      );
      expect(noPartition.code).toBe(2);
      expect(noPartition.stderr).toMatch(/--partition 3: topic "t" has 1 partition \(0 … 0\)/);
      expect(await committed()).toBe(0);

      // A live member: the broker refuses, naming why.
      const member = startCommand([
        "consume",
        "t",
        "--group",
        "g",
        "--follow",
        "--broker",
        address,
      ]);
      await waitFor(
        "the member to join",
        async () => (await client.describeGroup("g")).members.length === 1,
      );
      const warned = await reset("--to", "earliest");
      expect(warned.code, warned.stderr).toBe(0);
      expect(warned.stderr).toContain(
        'group "g" has 1 live member: --execute is refused until its consumers stop',
      );
      const refused = await reset("--to", "earliest", "--execute");
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(
        /unknown_member: group "g" has 1 live member: stop its consumers first, or wait out their sessions \(reset-offsets works on an inactive group/,
      );
      expect(refused.stdout.toString()).toBe("");
      member.proc.kill("SIGTERM");
      expect(await member.exited).toBe(0);
    },
  );

  // The offset-by-time lookup is the broker's and the options' parsing the CLI's, the same code on
  // every runtime; the reset itself (a commit through the CLI) runs on each target above.
  it.runIf(target === "node")(
    "groups reset-offsets --to-datetime, --by-duration, --all-topics and --from-file find each partition's offsets",
    async () => {
      const { client, address } = await brokerWithTopic();
      // Known timestamps: t's record i is (10 − i) hours old; u/0's record i is T0 + i minutes
      // over many 1 KiB segments; u/1's three are T0 + 100 minutes.
      const now = Math.floor(Date.now() / 1000) * 1000;
      const hour = 3_600_000;
      const t0 = now - 10 * hour;
      await client.produce(
        "t",
        Array.from({ length: 10 }, (_, i) => ({
          value: `t${i}`,
          timestampMs: now - (10 - i) * hour,
        })),
      );
      await client.createTopic({ name: "u", partitions: 2, config: { segment_bytes: 1024 } });
      for (let i = 0; i < 20; i++)
        await client.produce(
          "u",
          [{ value: `u${i}-${"x".repeat(200)}`, timestampMs: t0 + i * 60_000 }],
          {
            partition: 0,
          },
        );
      await client.produce(
        "u",
        Array.from({ length: 3 }, (_, i) => ({ value: `v${i}`, timestampMs: t0 + 100 * 60_000 })),
        { partition: 1 },
      );
      await client.commitOffsets({
        group: "g",
        offsets: [
          { topic: "t", partition: 0, offset: 1 },
          { topic: "u", partition: 0, offset: 2 },
        ],
      });
      const committed = async () =>
        Object.fromEntries(
          (await client.describeGroup("g")).offsets.map((o) => [
            `${o.topic}/${o.partition}`,
            o.committed,
          ]),
        );
      const reset = (...args: string[]) =>
        runCli(["groups", "reset-offsets", "g", "--broker", address, ...args]);
      const iso = (ms: number) => new Date(ms).toISOString();

      // The first record at or after the time, per partition; the high watermark after them all.
      // Three dry runs (nothing committed, checked after them): one process each, at once.
      const inZone = new Date(t0 + 200 * 60_000 + hour).toISOString().replace("Z", "+01:00");
      const [dry, named, after] = await Promise.all([
        reset("--topic", "u", "--to-datetime", iso(t0 + 5 * 60_000 + 1)),
        reset("--topic", "u", "--to-datetime", iso(t0 + 5 * 60_000 + 1), "--dry-run"),
        reset("--topic", "u", "--partition", "1", "--to-datetime", inZone),
      ]);
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.stdout.toString()).toBe("g\tu\t0\t6\ng\tu\t1\t0\n");
      expect(dry.stderr).toMatch(/dry run: nothing was committed/);
      expect(named.code, named.stderr).toBe(0);
      expect(named.stdout.toString()).toBe(dry.stdout.toString());
      expect(after.stdout.toString()).toBe("g\tu\t1\t3\n");
      expect(await committed()).toEqual({ "t/0": 1, "u/0": 2 });

      // --all-topics: the partitions the group has committed (u/1 it has not).
      const all = await reset("--all-topics", "--to-datetime", iso(t0 + 3 * 60_000), "--execute");
      expect(all.code, all.stderr).toBe(0);
      expect(all.stdout.toString()).toBe("g\tt\t0\t1\ng\tu\t0\t3\n");
      expect(all.stderr).toBe("");
      expect(await committed()).toEqual({ "t/0": 1, "u/0": 3 });

      // --by-duration: now minus it (t's record 6 is 4 h old, record 5 is 5 h old).
      const since = await reset("--topic", "t", "--by-duration", "PT4H30M", "--execute");
      expect(since.code, since.stderr).toBe(0);
      expect(since.stdout.toString()).toBe("g\tt\t0\t6\n");
      expect(await committed()).toEqual({ "t/0": 6, "u/0": 3 });
      const next = await runCli([
        "consume",
        "t",
        "--group",
        "g",
        "--max-records",
        "1",
        "--broker",
        address,
      ]);
      expect(next.stdout.toString()).toBe("t6\n");

      // --from-file: Kafka's topic,partition,offset lines.
      const dir = fresh();
      const csv = (name: string, text: string) => {
        writeFileSync(`${dir}/${name}`, text);
        return `${dir}/${name}`;
      };
      const file = csv("ok.csv", "t,0,4\n\nu,1,2\n");
      const fromFile = await reset("--from-file", file, "--execute");
      expect(fromFile.code, fromFile.stderr).toBe(0);
      expect(fromFile.stdout.toString()).toBe("g\tt\t0\t4\ng\tu\t1\t2\n");
      expect(await committed()).toEqual({ "t/0": 4, "u/0": 3, "u/1": 2 });

      // Bad input: exit 2 naming the value (the line), nothing committed.
      const cases = [
        [
          ["--from-file", csv("a.csv", "t,0,1\nu,x,1\n")],
          `${dir}/a.csv line 2: partition "x" is not a whole number`,
        ],
        [
          ["--from-file", csv("b.csv", "t,0,1\nnope,0,1\n")],
          `${dir}/b.csv line 2: topic "nope" does not exist`,
        ],
        [
          ["--from-file", csv("c.csv", "u,2,0\n")],
          `${dir}/c.csv line 1: topic "u" has 2 partitions (0 … 1), not partition 2`,
        ],
        [
          ["--from-file", csv("d.csv", "u,0,0\nt,0,11\n")],
          `${dir}/d.csv line 2: offset 11 of t/0 is outside its log start offset 0 … high watermark 10`,
        ],
        [["--from-file", `${dir}/missing.csv`], `--from-file ${dir}/missing.csv: cannot read it`],
        [
          ["--topic", "t", "--to-datetime", "2026-02-30T00:00:00Z"],
          '--to-datetime "2026-02-30T00:00:00Z": day 30 is not 01 … 28',
        ],
        [["--topic", "t", "--by-duration", "1h"], '--by-duration "1h": give an ISO-8601 duration'],
        [
          ["--all-topics", "--topic", "t", "--to", "latest"],
          "give --topic or --all-topics, not both",
        ],
        [
          ["--topic", "t", "--to", "latest", "--dry-run"],
          "give --dry-run (print the offsets) or --execute (commit them), not both",
        ],
      ] as const;
      // Each its own process, all at once: none commits anything (checked after them).
      const answers = await Promise.all(cases.map(([args]) => reset(...args, "--execute")));
      for (const [i, [, message]] of cases.entries()) {
        const bad = answers[i];
        expect(bad.code, bad.stderr).toBe(2);
        expect(bad.stderr).toContain(message);
        expect(bad.stdout.toString()).toBe("");
      }
      expect(await committed()).toEqual({ "t/0": 4, "u/0": 3, "u/1": 2 });
      const none = await runCli([
        ...["groups", "reset-offsets", "fresh", "--all-topics", "--to", "earliest"],
        ...["--broker", address],
      ]);
      expect(none.code).toBe(1);
      expect(none.stderr).toMatch(/group_not_found/);

      // A live member: refused as the other ways are.
      const member = startCommand([
        "consume",
        "t",
        "--group",
        "g",
        "--follow",
        "--broker",
        address,
      ]);
      await waitFor(
        "the member to join",
        async () => (await client.describeGroup("g")).members.length === 1,
      );
      const refused = await reset("--all-topics", "--by-duration", "P1D", "--execute");
      expect(refused.code).toBe(1);
      expect(refused.stderr).toMatch(
        /unknown_member: group "g" has 1 live member: stop its consumers first/,
      );
      member.proc.kill("SIGTERM");
      expect(await member.exited).toBe(0);
      expect((await committed())["u/0"]).toBe(3);
    },
  );

  it("an unknown command points to es-broker --help", async () => {
    const r = await runCli(["frobnicate"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toBe(
      `es-broker: unknown command "frobnicate"\nRun 'es-broker --help' for usage.\n`,
    );
  });
});
