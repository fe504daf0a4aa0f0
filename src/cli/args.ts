/** Shared argument helpers for the CLI: typed option parsing with errors that name the option. */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { isIPv4, isIPv6 } from "node:net";

/** A mistake in the command line; the CLI prints it with the usage hint and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/**
 * Parses an integer option value. `undefined` gives `fallback`.
 * @throws UsageError naming the option and the allowed range.
 */
export function intOption(
  name: string,
  value: string | undefined,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  if (!/^-?\d+$/.test(value))
    throw new UsageError(`--${name} must be an integer, got ${JSON.stringify(value)}`);
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max)
    throw new UsageError(`--${name} must be from ${min} to ${max}, got ${value}`);
  return n;
}

/** Parses `host:port` (IPv6 as `[::1]:9092`). @throws UsageError. */
export function hostPort(name: string, value: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(value);
  if (!m) throw new UsageError(`--${name} must be host:port, got ${JSON.stringify(value)}`);
  const port = Number(m[3]);
  if (port < 1 || port > 65535)
    throw new UsageError(`--${name} port must be from 1 to 65535, got ${m[3]}`);
  return { host: m[1] ?? m[2], port };
}

/**
 * True for addresses that only this machine can reach: an IP literal in 127.0.0.0/8, `::1` (or
 * an IPv4-mapped 127.x address), or the name `localhost` (which resolves to loopback by RFC
 * 6761). Any other name is not loopback, whatever it starts with (`127.example.net` may resolve
 * anywhere: attack8 F1).
 */
export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost") return true;
  if (isIPv4(h)) return h.startsWith("127.");
  if (!isIPv6(h)) return false;
  if (h === "::1" || h === "0:0:0:0:0:0:0:1") return true;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(h);
  return mapped !== null && isIPv4(mapped[1]) && mapped[1].startsWith("127.");
}

/**
 * Options of Kafka's command-line tools (kafka-topics.sh, kafka-console-producer.sh,
 * kafka-console-consumer.sh) that es-broker spells otherwise, with what to write instead: an
 * unknown option found here gets that hint (newuser report 8: `topics create t
 * --replication-factor 2` said only "unknown option"). `needs`: the hint is given only by a
 * command that takes one of these options (the equivalent must exist there). `instead` builds the
 * hint from the value given after the option, if any.
 */
const kafkaStyleOptions: Readonly<
  Record<string, { needs: readonly string[]; instead: (value: string | undefined) => string }>
> = {
  "replication-factor": {
    needs: ["config"],
    instead: (v) => `--config replication_factor=${v ?? "N"}`,
  },
  "min-insync-replicas": {
    needs: ["config"],
    instead: (v) => `--config min_insync_replicas=${v ?? "N"}`,
  },
  "bootstrap-server": { needs: ["broker"], instead: (v) => `--broker ${v ?? "HOST:PORT"}` },
  "broker-list": { needs: ["broker"], instead: (v) => `--broker ${v ?? "HOST:PORT"}` },
  "max-messages": { needs: ["max-records"], instead: (v) => `--max-records ${v ?? "N"}` },
  topic: {
    needs: ["partition", "partitions"],
    instead: (v) =>
      `the topic as a plain argument: es-broker produce|consume|topics create ${v ?? "TOPIC"}`,
  },
  ...Object.fromEntries(
    ["create", "list", "describe", "alter", "delete"].map((action) => [
      action,
      {
        needs: ["partitions"],
        instead: () => `the action as an argument: es-broker topics ${action}`,
      },
    ]),
  ),
};

/**
 * The hint for an unknown option that Kafka's tools take ({@link kafkaStyleOptions}), or "".
 * @param name the option without its dashes; `args` the command line, for the value given.
 */
function kafkaStyleHint(
  name: string,
  options: Readonly<Record<string, unknown>>,
  args: readonly string[],
): string {
  const known = Object.hasOwn(kafkaStyleOptions, name) ? kafkaStyleOptions[name] : undefined;
  if (known === undefined || !known.needs.some((o) => Object.hasOwn(options, o))) return "";
  let value: string | undefined;
  for (let i = 0; i < args.length && value === undefined; i++) {
    if (args[i].startsWith(`--${name}=`)) value = args[i].slice(name.length + 3);
    else if (args[i] === `--${name}` && i + 1 < args.length && !args[i + 1].startsWith("-"))
      value = args[i + 1];
  }
  return ` (Kafka's tools take it; es-broker takes ${known.instead(value === "" ? undefined : value)})`;
}

/**
 * `node:util` `parseArgs` with short errors that name the option (thrown as {@link UsageError})
 * instead of parseArgs' own texts, and with negative numbers accepted as values: `--partition -1`
 * reads as `--partition=-1`, so that the option's own check can say what is allowed
 * ("--partition must be from 0 to 4095, got -1") instead of "argument is ambiguous".
 * @throws UsageError for an unknown option, a missing or unexpected value, or an unexpected argument.
 */
export function parseCli<T extends ParseArgsConfig>(config: T): ReturnType<typeof parseArgs<T>> {
  const options = config.options ?? {};
  const args = [...(config.args ?? [])];
  for (let i = 0; i + 1 < args.length; i++) {
    const name = /^--([^=]+)$/.exec(args[i])?.[1];
    if (name !== undefined && options[name]?.type === "string" && /^-\d/.test(args[i + 1]))
      args.splice(i, 2, `${args[i]}=${args[i + 1]}`);
  }
  try {
    return parseArgs({ ...config, args }) as ReturnType<typeof parseArgs<T>>;
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    if (typeof code !== "string" || !code.startsWith("ERR_PARSE_ARGS")) throw err;
    const message = (err as Error).message;
    const quoted = /'([^' ]+)/.exec(message)?.[1] ?? "";
    if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION")
      throw new UsageError(
        `unknown option ${quoted}${kafkaStyleHint(quoted.replace(/^--?/, ""), options, args)}`,
      );
    if (code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL")
      throw new UsageError(`unexpected argument ${JSON.stringify(quoted)}`);
    if (/does not take an argument/.test(message)) throw new UsageError(`${quoted} takes no value`);
    if (/argument missing/.test(message)) throw new UsageError(`${quoted} needs a value`);
    if (/ambiguous/.test(message))
      throw new UsageError(
        `${quoted} needs a value; to give one that starts with "-", write ${quoted}=VALUE`,
      );
    throw new UsageError(message.split("\n")[0]);
  }
}
