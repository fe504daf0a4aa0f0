/**
 * The runtime targets of the end-to-end suite: the one place that says which command starts the
 * broker on each. vitest.config.ts makes one project per target (`e2e:node`, `e2e:deno`,
 * `e2e:bun`, `e2e:binary`) and hands the command to the test process as `ES_BROKER_CMD` (a JSON
 * array of words) with the target's name in `ES_BROKER_TARGET`; `harness.ts` reads them.
 *
 * To run the suite against some other command, set both before starting vitest:
 *   ES_BROKER_TARGET=mine ES_BROKER_CMD="/path/to/es-broker" npx vitest run --project e2e:mine
 * (a plain string is split on whitespace; a JSON array is taken as is).
 */
import { existsSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root (absolute). */
export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

/** One way of running es-broker. */
export interface Target {
  /** Short name used in test titles, project names and failure messages. */
  name: string;
  /** Command words that start es-broker (the subcommand and its options follow). */
  command: string[];
  /** What `es-broker --version` must mention on this target, e.g. "(deno " or ", standalone binary)". */
  versionMarker: string;
  /** Files the command needs; a missing one fails every test of the target, loudly. */
  requires: string[];
  /**
   * Size of soak scenarios (records, kill rounds) relative to the node target's, in (0, 1]. The
   * node target runs them at full size; the others at a fraction, since the whole of `npm test`
   * must stay well under 15 minutes on 2 vCPUs and each target repeats every scenario.
   */
  soakScale: number;
}

/**
 * The end-to-end files left out of `target`'s project (vitest.config.ts leaves them out rather
 * than skipping them): on every target but node, the files that test the broker's own logic —
 * the same code on every runtime, above `src/runtime/` — each with a fast file covering the same
 * front door on every target (`kafka.test.ts`, `durable-streams.test.ts`, `cli.test.ts`); on
 * Deno and Bun also {@link nodeAndBinaryE2eFiles}. A file belongs on every target only when it
 * exercises runtime-specific code: TLS, the HTTP and TCP servers, the file system and fsync,
 * signals, processes, stdin, the compiled binary. `ES_BROKER_E2E_ALL_TARGETS=1` runs every file on
 * every target; the Durable Streams conformance suite also with
 * `ES_BROKER_STREAMS_CONFORMANCE=all`.
 */
export function nodeOnlyE2eFiles(
  target: string,
  env: Record<string, string | undefined> = process.env,
): string[] {
  if (target === "node" || env.ES_BROKER_E2E_ALL_TARGETS === "1") return [];
  return [
    ...(env.ES_BROKER_STREAMS_CONFORMANCE === "all"
      ? []
      : ["test/e2e/durable-streams-conformance.test.ts"]),
    "test/e2e/durable-streams-scenarios.test.ts",
    "test/e2e/kafka-scenarios.test.ts",
    "test/e2e/client-bundle.test.ts",
    "test/e2e/mirror-upstream.test.ts",
    "test/e2e/mirror-group.test.ts",
    "test/e2e/cold-multipart.test.ts",
    // Refusing a Host is above the runtime layer (request.url is built from Host on every runtime).
    "test/e2e/browser-host.test.ts",
    // Cluster mode is runtime-neutral above the runtime layer: the node target covers it.
    "test/e2e/cluster.test.ts",
    "test/e2e/cluster-attack.test.ts",
    "test/e2e/cluster-outage.test.ts",
    "test/e2e/cluster-lease.test.ts",
    "test/e2e/cluster-tls.test.ts",
    "test/e2e/cluster-state.test.ts",
    "test/e2e/cluster-sigterm.test.ts",
    "test/e2e/cluster-leaving.test.ts",
    "test/e2e/cluster-elect.test.ts",
    "test/e2e/cluster-topic-id.test.ts",
    // The watch guard and its reopen are cluster logic; the etcd client under them is one
    // node:http(s) module on every runtime (src/runtime/etcd.ts), whose watch etcd-tls.test.ts
    // starts on every target. The other three targets cost 68 s of serial time here.
    "test/e2e/cluster-watch-deaf.test.ts",
    // The etcd client over TLS is runtime-specific, and etcd-tls.test.ts covers it on every
    // target; three brokers failing over on it is the cluster's logic.
    "test/e2e/cluster-etcd-tls.test.ts",
    // The mirror following an upstream cluster's leaders: the mirror's and the cluster's logic.
    "test/e2e/cluster-mirror.test.ts",
    // Schema id translation and the bootstrap list are the mirror's logic; the mirror's sockets,
    // TLS, signals and registry requests (node:http(s)) are driven on every target by mirror.test.ts
    // and by the SIGHUP key reload in it. The other three targets cost ~130 s here.
    "test/e2e/mirror-schemas.test.ts",
    "test/e2e/mirror-bootstrap.test.ts",
    // The Hono app and the broker against the OpenAPI document: the same code on every runtime.
    // Every answer of every other e2e file is still checked against the document on each target
    // (openapi-setup.ts), and hostile-fuzz.test.ts drives each runtime's HTTP server with
    // hostile input.
    "test/e2e/openapi.test.ts",
    // The 65 s keep-alive is set on node:http and the raw path; Deno's and Bun's servers keep
    // their own idle timeouts (docs/decisions.md §18).
    "test/e2e/http-keep-alive.test.ts",
    // Group membership, assignment and committed offsets are the broker's and the CLI client's
    // logic; what they touch of the runtime (TCP, signals, timers, commits on disk) is covered on
    // every target by cli.test.ts (`consume --follow --group` stopped by signals, committed, left)
    // and core.test.ts (SIGKILL).
    "test/e2e/groups.test.ts",
    // Produce on the raw socket runs on Node only (runtime/http-raw.ts); hostile*.test.ts drive
    // every runtime's HTTP server with the same mixes of good and bad requests.
    "test/e2e/http-raw.test.ts",
    // The NDJSON fetch answer is the Hono app's, the same code on every runtime.
    "test/e2e/http-fetch-ndjson.test.ts",
    // The CLI's own logic (cli.test.ts keeps what touches the runtime: signals, stdin, listen and
    // file errors, exit codes).
    "test/e2e/cli-commands.test.ts",
    // The schema registry (registering, compatibility, produce-time validation, `es-broker
    // schemas`) is the broker's and the Hono app's logic; its schemas.json goes through the runtime
    // layer's file system, which check.test.ts (a damaged schemas.json) and core.test.ts cover on
    // every target, as kafka.test.ts and durable-streams.test.ts do its HTTP and TCP servers.
    "test/e2e/registry.test.ts",
    // The console's page, scripts and API calls are the same on every runtime: Deno and Bun run
    // the sources the Node bundle is built from. The binary keeps the file
    // (`nodeAndBinaryE2eFiles`): its console is the copy compiled into it.
    ...(target === "binary" ? [] : nodeAndBinaryE2eFiles),
  ];
}

/**
 * End-to-end files that run after the parallel part of a run, four at a time beside nothing else
 * (vitest.config.ts, projects `e2e:<target>-serial`): every `test/e2e/cluster*.test.ts`, whose
 * assertions lean on timing under faults — etcd leases, SIGSTOP, elections — and the files that
 * SIGSTOP a process and signal others around it (`cli.test.ts`, `groups.test.ts`, with sessions
 * of 1–1.5 s), which a loaded machine could upset. Paths relative to the repository root.
 */
export function serialE2eFiles(): string[] {
  return readdirSync(join(repoRoot, "test/e2e"))
    .filter((name) => /^cluster.*\.test\.ts$|^cli\.test\.ts$|^groups\.test\.ts$/.test(name))
    .sort()
    .map((name) => `test/e2e/${name}`);
}

/** End-to-end files that run on the node and binary targets only (see {@link nodeOnlyE2eFiles}). */
export const nodeAndBinaryE2eFiles: readonly string[] = ["test/e2e/console.test.ts"];

/** `soakScale` of the Deno, Bun and binary targets. */
export const soakScaleSecondary = 0.3;

const deno = join(repoRoot, "tools/node_modules/.bin/deno");
const bun = join(repoRoot, "tools/node_modules/.bin/bun");
const bundle = join(repoRoot, "dist/es-broker.mjs");
const binary = join(repoRoot, "dist/es-broker");
const sources = join(repoRoot, "src/main.ts");

/** The four targets `npm test` runs: the Node bundle, Deno and Bun from sources, the compiled binary. */
export const standardTargets: readonly Target[] = [
  {
    name: "node",
    command: [process.execPath, bundle],
    versionMarker: "(node ",
    requires: [bundle],
    soakScale: 1,
  },
  {
    name: "deno",
    command: [deno, "run", "--allow-all", `--config=${join(repoRoot, "deno.json")}`, sources],
    versionMarker: "(deno ",
    requires: [deno],
    soakScale: soakScaleSecondary,
  },
  {
    name: "bun",
    command: [bun, sources],
    versionMarker: "(bun ",
    requires: [bun],
    soakScale: soakScaleSecondary,
  },
  {
    name: "binary",
    command: [binary],
    versionMarker: ", standalone binary)",
    requires: [binary],
    soakScale: soakScaleSecondary,
  },
];

/** Parses `ES_BROKER_CMD`: a JSON array of words, or a string split on whitespace. */
export function parseCommand(raw: string): string[] {
  const trimmed = raw.trim();
  if (trimmed.startsWith("[")) {
    const words: unknown = JSON.parse(trimmed);
    if (!Array.isArray(words) || words.length === 0 || !words.every((w) => typeof w === "string")) {
      throw new Error(`ES_BROKER_CMD must be a non-empty JSON array of strings, got ${raw}`);
    }
    return words as string[];
  }
  const words = trimmed.split(/\s+/).filter(Boolean);
  if (words.length === 0) throw new Error("ES_BROKER_CMD is empty");
  return words;
}

/**
 * The targets of this run: the four standard ones, or, when `ES_BROKER_CMD` is set in the
 * environment vitest starts in, only that command (named by `ES_BROKER_TARGET`, default "custom").
 */
export function e2eTargets(env: Record<string, string | undefined> = process.env): Target[] {
  const raw = env.ES_BROKER_CMD;
  if (raw === undefined || raw.trim() === "") return [...standardTargets];
  const name = env.ES_BROKER_TARGET ?? "custom";
  const standard = standardTargets.find((t) => t.name === name);
  return [
    {
      name,
      command: parseCommand(raw),
      versionMarker: standard?.versionMarker ?? "es-broker ",
      requires: [],
      soakScale: standard?.soakScale ?? 1,
    },
  ];
}

/** The target of the current test process, from `ES_BROKER_TARGET` / `ES_BROKER_CMD` (default: the Node bundle). */
export function currentTarget(env: Record<string, string | undefined> = process.env): Target {
  const name = env.ES_BROKER_TARGET ?? "node";
  const raw = env.ES_BROKER_CMD;
  const standard = standardTargets.find((t) => t.name === name);
  if (raw === undefined || raw.trim() === "") {
    if (!standard)
      throw new Error(
        `ES_BROKER_TARGET=${name} is not a standard target (${standardTargets.map((t) => t.name).join(", ")}) and ES_BROKER_CMD is not set`,
      );
    return standard;
  }
  const command = parseCommand(raw);
  const same =
    standard !== undefined && JSON.stringify(standard.command) === JSON.stringify(command);
  return same ? standard : { ...(e2eTargets(env)[0] as Target), name, command };
}

/** Files the target needs that are missing (empty when it can run). */
export function missingFiles(target: Target): string[] {
  return target.requires.filter((path) => !existsSync(path));
}
