/**
 * Starts the real broker process for end-to-end tests. The command comes from one place:
 * `ES_BROKER_CMD` (a shell-style word list, e.g. "node dist/es-broker.mjs" — the default — or
 * "tools/node_modules/.bin/deno run -A src/main.ts", or "dist/es-broker"), so the same scenarios
 * run against every runtime and the compiled binary. `ES_BROKER_TARGET` names it in failures.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { resolve } from "node:path";

/** The command words that start the broker (before "serve"). */
export function brokerCommand(): string[] {
  const raw = process.env.ES_BROKER_CMD ?? `node ${resolve("dist/es-broker.mjs")}`;
  return raw.split(/\s+/).filter(Boolean);
}

/** A short name of the target runtime for test titles ("node" by default). */
export const target = process.env.ES_BROKER_TARGET ?? "node";

/** A running broker process. */
export interface BrokerProcess {
  proc: ChildProcess;
  httpUrl: string;
  tcp: { host: string; port: number };
  /** Everything the process wrote to stderr so far. */
  stderr(): string;
  /** Sends a signal and resolves with the exit code (or signal name) once it exits. */
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/** Starts `<command> serve --data-dir DIR --http-port 0 --tcp-port 0 ...extra` and waits for its listening line. */
export async function startBroker(dataDir: string, extra: string[] = [], env: Record<string, string> = {}): Promise<BrokerProcess> {
  const [cmd, ...args] = brokerCommand();
  const proc = spawn(cmd, [...args, "serve", "--data-dir", dataDir, "--http-port", "0", "--tcp-port", "0", ...extra], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, ...env },
  });
  let out = "";
  let err = "";
  proc.stderr!.on("data", (d) => (err += d));
  const exited = new Promise<number | string>((res) => proc.on("exit", (code, signal) => res(code ?? signal ?? "unknown")));
  const line = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`[${target}] broker did not start within 30 s; stderr:\n${err}`)), 30_000);
    proc.stdout!.on("data", (d) => {
      out += d;
      const nl = out.indexOf("\n");
      if (nl >= 0) {
        clearTimeout(timer);
        res(out.slice(0, nl));
      }
    });
    void exited.then((code) => {
      clearTimeout(timer);
      rej(new Error(`[${target}] broker exited (${code}) before listening; stderr:\n${err}`));
    });
  });
  const m = /http=http:\/\/([^\s]+):(\d+) tcp=([^\s]+):(\d+)/.exec(line);
  if (!m) throw new Error(`[${target}] unexpected start-up line: ${line}`);
  return {
    proc,
    httpUrl: `http://${m[1]}:${m[2]}`,
    tcp: { host: m[3], port: Number(m[4]) },
    stderr: () => err,
    stop: (signal = "SIGTERM") => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
}

/** Runs the CLI once (`<command> ...args`) with optional stdin; resolves with exit code and output. */
export function runCli(args: string[], stdin?: Uint8Array): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  const [cmd, ...pre] = brokerCommand();
  return new Promise((res) => {
    const proc = spawn(cmd, [...pre, ...args], { stdio: ["pipe", "pipe", "pipe"] });
    const chunks: Buffer[] = [];
    let err = "";
    proc.stdout.on("data", (d: Buffer) => chunks.push(d));
    proc.stderr.on("data", (d) => (err += d));
    proc.on("close", (code) => res({ code, stdout: Buffer.concat(chunks), stderr: err }));
    if (stdin) proc.stdin.end(stdin);
    else proc.stdin.end();
  });
}
