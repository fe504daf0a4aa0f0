/**
 * Starts the real broker process for end-to-end tests. The command comes from one place:
 * `ES_BROKER_CMD` with `ES_BROKER_TARGET` naming it, which vitest.config.ts sets per project from
 * `targets.ts` (the Node bundle, Deno and Bun from sources, the compiled binary), so the same
 * scenarios run against every runtime. Without them the Node bundle is used. Every error this
 * module throws starts with `[target]`.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { currentTarget, missingFiles, repoRoot, type Target } from "./targets.ts";

/** The target of this test process (see targets.ts). */
export const targetInfo: Target = currentTarget();

/** A short name of the target runtime for test titles ("node" by default). */
export const target = targetInfo.name;

/**
 * `full` scaled for this target: the full size on the node target, a fraction (`soakScale`) on the
 * others, at least 1. Soak scenarios (many records, many kills) size themselves with it, e.g.
 * `const total = scaled(100_000)`.
 */
export function scaled(full: number): number {
  return Math.max(1, Math.round(full * targetInfo.soakScale));
}

/** The command words that start the broker (before "serve"). */
export function brokerCommand(): string[] {
  return targetInfo.command;
}

/**
 * Throws, naming the target and what is missing, when the target cannot run on this machine
 * (e.g. tools/node_modules/.bin/bun absent), so that such a target fails loudly instead of
 * being skipped.
 */
export function assertTargetRunnable(): void {
  const missing = missingFiles(targetInfo);
  if (missing.length > 0) {
    throw new Error(
      `[${target}] cannot run: missing ${missing.join(", ")}. \`npm ci\` installs deno and bun into tools/ ` +
        `(scripts/install-tools.mjs) and \`npm run build\` writes dist/ (\`npm test\` does both).`,
    );
  }
}

/**
 * The `http(s)://host:port` origins of every broker this test process started: answers from them
 * are checked against the OpenAPI document (`openapi-setup.ts`).
 */
export const brokerOrigins = new Set<string>();

/** A running broker process. */
export interface BrokerProcess {
  proc: ChildProcess;
  /** `http://host:port`, or `https://host:port` when the broker serves TLS. */
  httpUrl: string;
  tcp: { host: string; port: number };
  /** The Kafka listener, when started with `--kafka-port`. */
  kafka?: { host: string; port: number };
  /** `http://127.0.0.1:port/metrics` when started with `--metrics-port`. */
  metricsUrl?: string;
  /** Its start-up line (`es-broker … listening: …`). */
  listening: string;
  /** Everything the process wrote to stderr so far. */
  stderr(): string;
  /** Sends a signal and resolves with the exit code (or signal name) once it exits. */
  stop(signal?: NodeJS.Signals): Promise<number | string>;
}

/** How to start the process, beyond the target's command. */
export interface StartOptions {
  /** Working directory (default: the repository root). */
  cwd?: string;
  /** Start with exactly `env` instead of this process's environment plus `env` (like `env -i`). */
  replaceEnv?: boolean;
  /** Command words instead of the target's (e.g. a copy of the binary). */
  command?: string[];
}

/** Starts `<command> serve --data-dir DIR --http-port 0 --tcp-port 0 ...extra` and waits for its listening line. */
export async function startBroker(
  dataDir: string,
  extra: string[] = [],
  env: Record<string, string> = {},
  options: StartOptions = {},
): Promise<BrokerProcess> {
  if (options.command === undefined) assertTargetRunnable();
  const [cmd, ...args] = options.command ?? brokerCommand();
  const proc = spawn(
    cmd,
    [...args, "serve", "--data-dir", dataDir, "--http-port", "0", "--tcp-port", "0", ...extra],
    {
      cwd: options.cwd ?? repoRoot,
      stdio: ["ignore", "pipe", "pipe"],
      env: options.replaceEnv ? env : { ...process.env, ...env },
    },
  );
  proc.on("error", () => {}); // a spawn failure shows up as the exit below
  let out = "";
  let err = "";
  proc.stderr!.on("data", (d) => (err += d));
  const exited = new Promise<number | string>((res) =>
    proc.on("exit", (code, signal) => res(code ?? signal ?? "unknown")),
  );
  const line = await new Promise<string>((res, rej) => {
    const timer = setTimeout(
      () => rej(new Error(`[${target}] broker did not start within 30 s; stderr:\n${err}`)),
      30_000,
    );
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
  const m = /http=(https?):\/\/([^\s]+):(\d+) tcp=([^\s]+):(\d+)/.exec(line);
  if (!m) throw new Error(`[${target}] unexpected start-up line: ${line}`);
  const k = / kafka=([^\s]+):(\d+)/.exec(line);
  brokerOrigins.add(`${m[1]}://${m[2]}:${m[3]}`);
  return {
    proc,
    httpUrl: `${m[1]}://${m[2]}:${m[3]}`,
    tcp: { host: m[4], port: Number(m[5]) },
    kafka: k ? { host: k[1], port: Number(k[2]) } : undefined,
    metricsUrl: / metrics=(http:\/\/\S+)/.exec(line)?.[1],
    listening: line,
    stderr: () => err,
    stop: (signal = "SIGTERM") => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      return exited;
    },
  };
}

/**
 * Runs the CLI once (`<command> ...args`) with optional stdin; resolves with exit code and output.
 * `options.env` replaces the environment (default: this process's); `options.command` replaces the target's command.
 */
export function runCli(
  args: string[],
  stdin?: Uint8Array,
  options: { cwd?: string; env?: Record<string, string>; command?: string[] } = {},
): Promise<{ code: number | null; stdout: Buffer; stderr: string }> {
  if (options.command === undefined) assertTargetRunnable();
  const [cmd, ...pre] = options.command ?? brokerCommand();
  return new Promise((res) => {
    const proc = spawn(cmd, [...pre, ...args], {
      cwd: options.cwd ?? repoRoot,
      env: options.env ?? process.env,
      stdio: ["pipe", "pipe", "pipe"],
    });
    proc.on("error", (error) =>
      res({
        code: null,
        stdout: Buffer.alloc(0),
        stderr: `[${target}] cannot start ${cmd}: ${error.message}`,
      }),
    );
    const chunks: Buffer[] = [];
    let err = "";
    proc.stdout.on("data", (d: Buffer) => chunks.push(d));
    proc.stderr.on("data", (d) => (err += d));
    proc.on("close", (code) => res({ code, stdout: Buffer.concat(chunks), stderr: err }));
    // A command that exits before reading all of its stdin (an error test) closes the pipe: EPIPE
    // is then expected, and the exit code and output say how the run went.
    proc.stdin.on("error", (e: NodeJS.ErrnoException) => {
      if (e.code !== "EPIPE") err += `\nstdin: ${e.message}`;
    });
    if (stdin) proc.stdin.end(stdin);
    else proc.stdin.end();
  });
}
