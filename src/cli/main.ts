/**
 * The `es-broker` command: dispatches to `serve`, `produce`, `consume`, `topics`, `groups`, `keys`,
 * `schemas`, `check` and `cluster` (one-line summaries in {@link mainHelp}, options in each one's `--help`).
 * Arguments are
 * parsed with `node:util` `parseArgs` (the same on Node, Deno and Bun; `@std/cli` cannot be
 * installed from this project's registries). Exit codes: 0 success, 1 failure, 2 usage error.
 */
import { version } from "../version.ts";
import { runtimeDescription } from "../runtime/info.ts";
import { UsageError } from "./args.ts";
import { StdoutClosedError, watchStdout } from "./stdout.ts";
import { serve } from "./serve.ts";
import { check } from "./check.ts";
import { consume, groups, produce, topics } from "./client-commands.ts";
import { schemas } from "./schemas.ts";
import { ClientError, closedWithoutCertificateNote } from "../client/client.ts";
import { validateTopicName } from "../broker/config.ts";
import { Errors } from "../broker/errors.ts";
import { errorMessage } from "../lib/errors.ts";
import { keys } from "./keys.ts";
import { cluster } from "./cluster.ts";
import { EtcdError } from "../cluster/etcd.ts";
import { apiKeyEnv, refuseKeyInArgv } from "./connection.ts";
import { endOnStopSignals } from "./signals.ts";

/** Each command of {@link main}, in help order, with its one-line summary (each has its own `--help`). */
const commandSummaries: readonly (readonly [string, string])[] = [
  ["serve", "run the broker (HTTP and TCP ports, data directory)"],
  ["produce", "append standard input to a topic, one record per line"],
  ["consume", "print a topic's records, alone or as a member of a consumer group"],
  ["topics", "create, list, describe and delete topics"],
  ["groups", "list and describe consumer groups (members, offsets, lag)"],
  ["keys", "create, list and revoke API keys"],
  ["schemas", "register, list, get and check schemas in the broker's schema registry"],
  ["check", "verify a stopped broker's data directory offline"],
  [
    "cluster",
    "show a cluster's brokers, controller and partition leaders (cluster status); unclean leader election (cluster elect)",
  ],
];

/** The commands that end at once on a signal (`signals.ts`); the others stop gracefully. */
const oneShotCommands: ReadonlySet<string> = new Set([
  "topics",
  "check",
  "groups",
  "keys",
  "schemas",
  "cluster",
]);

/** The commands {@link main} knows. */
const commands: readonly string[] = commandSummaries.map(([name]) => name);

/** Help text of `es-broker`. */
export const mainHelp = `Usage: es-broker <command> [options]

A durable event-streaming broker: partitioned topics over HTTP and TCP, fsync before every ack.

Commands:
${commandSummaries.map(([name, summary]) => `  ${name.padEnd(11)}${summary}`).join("\n")}

Run 'es-broker <command> --help' for a command's options (e.g. es-broker consume --help).

Options:
  -v, --version   print the version and the runtime
  -h, --help      show this help

Exit codes: 0 success, 1 failure, 2 usage error. SIGINT or SIGTERM asks serve, produce and
consume to stop: they finish what is under way (acknowledgements, commits, output) and exit 0;
a second signal exits at once with 130 (SIGINT) or 143 (SIGTERM), as do the other commands on
their first (the same signal again within 1 s of the first is the same request). A reader of standard output that goes away (es-broker consume t | head -1) stops a
command the same way, exit 0 without a message, as kcat does: consume --group commits only the
records written before and leaves the group.
`;

/** Runs the command line; resolves with the exit code. Errors print one line on stderr. */
export async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    watchStdout();
    refuseKeyInArgv(rest);
    if (command !== undefined && oneShotCommands.has(command)) endOnStopSignals();
    switch (command) {
      case undefined:
      case "-h":
      case "--help":
      case "help":
        process.stdout.write(mainHelp);
        return command === undefined ? 2 : 0;
      case "-v":
      case "--version":
      case "version":
        process.stdout.write(`es-broker ${version} (${runtimeDescription()})\n`);
        return 0;
      case "serve":
        return await serve(rest);
      case "produce":
        return await produce(rest);
      case "consume":
        return await consume(rest);
      case "topics":
        return await topics(rest);
      case "check":
        return await check(rest);
      case "groups":
        return await groups(rest);
      case "keys":
        return await keys(rest);
      case "schemas":
        return await schemas(rest);
      case "cluster":
        return await cluster(rest);
      default:
        throw new UsageError(`unknown command ${JSON.stringify(command)}`);
    }
  } catch (err) {
    // The reader of stdout went away (`| head`): a request to stop, answered quietly (stdout.ts).
    if (err instanceof StdoutClosedError) return 0;
    if (
      err instanceof UsageError ||
      (err as { code?: string })?.code?.startsWith?.("ERR_PARSE_ARGS")
    ) {
      // The hint names the command's own help only for a command that has one.
      const helpOf = command !== undefined && commands.includes(command) ? `${command} ` : "";
      process.stderr.write(
        `es-broker: ${errorMessage(err)}\nRun 'es-broker ${helpOf}--help' for usage.\n`,
      );
      return 2;
    }
    const message = err instanceof ClientError ? `${err.code}: ${err.message}` : errorMessage(err);
    const hint =
      err instanceof ClientError && err.code === Errors.keyRevoked.code
        ? `es-broker: the API key was revoked (or changed) while this command ran: run it again with a current key (--api-key-file FILE or $${apiKeyEnv})\n`
        : err instanceof ClientError &&
            err.code === Errors.topicNotFound.code &&
            (command === "produce" || command === "consume")
          ? createTopicHint(err.message, command)
          : // etcd's messages (serve --cluster) name their own fix.
            err instanceof EtcdError
            ? ""
            : hintFor(message);
    process.stderr.write(`es-broker: ${message}\n${hint}`);
    return 1;
  }
}

/**
 * For produce and consume of a topic that does not exist: topics are not created on demand, so
 * the line says how to create it (the name from the broker's `Cannot find topic "NAME"`). For a
 * name no topic can have, it says what is wrong with the name instead; for `consume` of a
 * pattern (`*`, `?`), that it takes one topic.
 */
function createTopicHint(message: string, command: "produce" | "consume"): string {
  const quoted = /Cannot find topic ("(?:[^"\\]|\\.)*")/.exec(message)?.[1];
  let name = "TOPIC";
  try {
    if (quoted !== undefined) name = JSON.parse(quoted) as string;
  } catch {}
  try {
    validateTopicName(name);
  } catch (error) {
    if (command === "consume" && /[*?]/.test(name))
      return "es-broker: consume reads one topic, named in full: topic patterns (wildcards) are not supported\n";
    return `es-broker: no topic can have this name: ${errorMessage(error)}\n`;
  }
  const shown = /^[\w.-]+$/.test(name) ? name : `'${name.replaceAll("'", "'\\''")}'`;
  return `es-broker: topics are not created on demand: create it first with es-broker topics create ${shown} [--partitions N]\n`;
}

/**
 * A line naming the option that fixes a failure the broker or the client library describes in
 * protocol terms (a key, TLS), or "" for any other failure.
 */
function hintFor(message: string): string {
  if (message.includes("an API key is required"))
    return `es-broker: give the API key with --api-key-file FILE or $${apiKeyEnv}\n`;
  if (message.includes("closes plain connections"))
    return "es-broker: if the broker serves TLS, connect with TLS: --tls-ca FILE (the broker's CA) or --tls (the system's CAs); if it is at its --max-connections bound, its log says so\n";
  // The TLS libraries' words differ: Node (OpenSSL), Bun (BoringSSL), Deno (rustls).
  if (/certificate[ _]required|CertificateRequired/i.test(message))
    return "es-broker: the broker requires a client certificate (mutual TLS): add --tls-cert FILE --tls-key FILE (a certificate its --tls-client-ca signed)\n";
  // A non-TLS answer to the handshake: the broker's plain TCP port says so in plain text
  // (transport.ts `plainPortAnswer`), which each TLS library reports in its own words.
  if (
    /wrong[ _]version[ _]number|InvalidContentType|corrupt message|packet length too long/i.test(
      message,
    )
  )
    return "es-broker: the broker answered without TLS: the port is likely plain TCP: drop --tls-ca/--tls (or start the broker with --tls-cert FILE --tls-key FILE)\n";
  // The broker closed the TLS connection with no reason given, and no certificate was sent
  // (Deno's TLS server closes before its certificate_required alert arrives): both possibilities.
  if (message.includes(closedWithoutCertificateNote))
    return "es-broker: the broker closed the TLS connection and this command sent no client certificate: if it requires one (mutual TLS), add --tls-cert FILE --tls-key FILE (a certificate its --tls-client-ca signed); otherwise its log says why it closed the connection\n";
  if (
    /self[- ]signed certificate|unable to verify the first certificate|unable to get local issuer certificate|UnknownIssuer/i.test(
      message,
    )
  )
    return "es-broker: the broker's certificate is not signed by a CA this command trusts: name its CA with --tls-ca FILE\n";
  if (/does not match certificate's altnames|NotValidForName|ALTNAME/i.test(message))
    return "es-broker: the broker's certificate does not name the host this command connected to: use a name or address its subjectAltName lists\n";
  return "";
}
