/**
 * A real S3-compatible server for tests: `moto_server` (Python `moto`) as a child process on a
 * free loopback port, with one bucket created. If `moto_server` is missing, the helper installs
 * `moto[server]` with pip once; if that fails too, it throws naming what is missing (a test never
 * skips silently).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { freePorts } from "./ports.ts";
import { AwsClient } from "aws4fetch";

/** Credentials moto accepts (it checks none); the real store gets them from `AWS_*` variables. */
export const motoCredentials = {
  accessKeyId: "test-access-key",
  secretAccessKey: "test-secret-key",
};

/** A running moto server. */
export interface MotoServer {
  /** `http://127.0.0.1:PORT`. */
  endpoint: string;
  port: number;
  /** Creates a bucket. */
  createBucket(name: string): Promise<void>;
  /** Stops the process. */
  stop(): Promise<void>;
  /** SIGSTOP / SIGCONT: a store that hangs (accepts connections, answers nothing), then comes back. */
  pause(): void;
  resume(): void;
}

/** A free TCP port on 127.0.0.1, below the ephemeral range (`freePorts` of ports.ts says why). */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}

function hasMoto(): boolean {
  return spawnSync("moto_server", ["--help"], { stdio: "ignore" }).status === 0;
}

let installTried = false;

/** Makes sure `moto_server` is on the PATH (installing `moto[server]` with pip if needed). */
export function ensureMoto(): void {
  if (hasMoto()) return;
  if (!installTried) {
    installTried = true;
    spawnSync("python3", ["-m", "pip", "install", "--quiet", "moto[server]"], { stdio: "inherit" });
  }
  if (!hasMoto())
    throw new Error(
      "These tests need moto_server (Python package moto[server]): `python3 -m pip install 'moto[server]'` failed or left no moto_server on the PATH",
    );
}

/** Starts moto_server on a free port and waits until it answers. */
export async function startMoto(): Promise<MotoServer> {
  ensureMoto();
  const port = await freePort();
  const child: ChildProcess = spawn("moto_server", ["-H", "127.0.0.1", "-p", String(port)], {
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const client = new AwsClient({
    ...motoCredentials,
    service: "s3",
    region: "us-east-1",
    retries: 0,
  });
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`moto_server exited (${child.exitCode}): ${stderr}`);
    try {
      const r = await fetch(`${endpoint}/`);
      await r.arrayBuffer();
      break;
    } catch {
      if (Date.now() > deadline) {
        child.kill("SIGKILL");
        throw new Error(`moto_server did not answer on ${endpoint} within 30 s: ${stderr}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return {
    endpoint,
    port,
    async createBucket(name) {
      const r = await client.fetch(`${endpoint}/${name}`, { method: "PUT" });
      await r.arrayBuffer();
      if (r.status !== 200) throw new Error(`creating bucket ${name} failed: HTTP ${r.status}`);
    },
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once("exit", () => resolve());
        // A stopped process gets SIGKILL too, but SIGCONT first keeps its exit prompt everywhere.
        child.kill("SIGCONT");
        child.kill("SIGKILL");
      }),
    pause: () => void child.kill("SIGSTOP"),
    resume: () => void child.kill("SIGCONT"),
  };
}
