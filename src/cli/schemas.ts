/**
 * `es-broker schemas`: the schema registry from the command line. It talks HTTP to a running
 * broker's registry (`--registry URL`, default `http://127.0.0.1:8080/registry`), the same
 * Confluent API any registry client uses (docs/registry.md).
 */
import { readFileSync } from "node:fs";
import { UsageError, parseCli } from "./args.ts";
import { errorMessage } from "../lib/errors.ts";

const registryDefault = "http://127.0.0.1:8080/registry";
const mediaType = "application/vnd.schemaregistry.v1+json";

/** Help text of `es-broker schemas`. */
export const schemasHelp = `Usage: es-broker schemas <register|list|get|check> [ARGS] [options]

  register SUBJECT FILE      register the schema in FILE under SUBJECT; prints {"id","version"}
  list                       subjects, one per line
  list SUBJECT               versions of SUBJECT, one per line
  get SUBJECT [VERSION]      a version (default: latest) as JSON: subject, version, id, schema
  get --id ID                the schema with id ID as JSON
  check SUBJECT FILE         would FILE be accepted under SUBJECT? prints "compatible" (exit 0)
                             or "incompatible" and the reasons (exit 1); --version V checks
                             against version V only

The schema type is --type, else AVRO for a .avsc file, JSON for a file whose JSON has a
"$schema" key, AVRO otherwise.

Options:
  --registry URL           the broker's registry (default ${registryDefault})
  --type AVRO|JSON         the schema type of FILE
  --version V              with check: compare with version V only (a number or "latest")
  --id ID                  with get: the schema id
  --deleted                with list and get: include soft-deleted subjects and versions
  -h, --help               show this help
`;

/** A registry answer that is not 2xx: its Confluent error code and message. */
class RegistryCallError extends Error {
  override name = "RegistryCallError";
}

async function call(base: string, method: string, path: string, body?: unknown): Promise<unknown> {
  let res: Response;
  try {
    res = await fetch(`${base.replace(/\/+$/, "")}${path}`, {
      method,
      headers:
        body === undefined
          ? { accept: mediaType }
          : { accept: mediaType, "content-type": mediaType },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new RegistryCallError(`cannot reach the registry at ${base}: ${errorMessage(err)}`);
  }
  const text = await res.text();
  let value: unknown;
  try {
    value = text === "" ? null : JSON.parse(text);
  } catch {
    throw new RegistryCallError(
      `${method} ${path}: HTTP ${res.status}, not JSON: ${text.slice(0, 200)}`,
    );
  }
  if (!res.ok) {
    const error = value as { error_code?: unknown; message?: unknown } | null;
    throw new RegistryCallError(
      `${String(error?.message ?? `HTTP ${res.status}`)} (error_code ${String(error?.error_code ?? res.status)})`,
    );
  }
  return value;
}

/** The schema of FILE and its type (see the help). @throws UsageError if unreadable or the type is unknown. */
function readSchemaFile(
  file: string,
  type: string | undefined,
): { schema: string; schemaType: string } {
  let schema: string;
  try {
    schema = readFileSync(file, "utf8");
  } catch (err) {
    throw new UsageError(`cannot read ${JSON.stringify(file)}: ${errorMessage(err)}`);
  }
  if (type !== undefined) {
    const upper = type.toUpperCase();
    if (upper !== "AVRO" && upper !== "JSON")
      throw new UsageError(`--type must be AVRO or JSON, got ${JSON.stringify(type)}`);
    return { schema, schemaType: upper };
  }
  if (file.endsWith(".avsc")) return { schema, schemaType: "AVRO" };
  let json: unknown;
  try {
    json = JSON.parse(schema);
  } catch {
    return { schema, schemaType: "AVRO" }; // the registry names the parse error
  }
  const isJsonSchema = typeof json === "object" && json !== null && "$schema" in json;
  return { schema, schemaType: isJsonSchema ? "JSON" : "AVRO" };
}

/** `es-broker schemas …`. Resolves with the exit code. */
export async function schemas(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      registry: { type: "string", default: registryDefault },
      type: { type: "string" },
      version: { type: "string" },
      id: { type: "string" },
      deleted: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: true,
  });
  if (values.help) {
    process.stdout.write(schemasHelp);
    return 0;
  }
  const base = values.registry!;
  const [command, ...args] = positionals;
  const deleted = values.deleted ? "?deleted=true" : "";
  const subjectPath = (s: string) => `/subjects/${encodeURIComponent(s)}`;
  const need = (count: number, usage: string) => {
    if (args.length !== count) throw new UsageError(`usage: es-broker schemas ${usage}`);
  };
  try {
    switch (command) {
      case "register": {
        need(2, "register SUBJECT FILE");
        const [subject, file] = args;
        const input = readSchemaFile(file, values.type);
        const { id } = (await call(base, "POST", `${subjectPath(subject)}/versions`, input)) as {
          id: number;
        };
        const found = (await call(base, "POST", subjectPath(subject), input)) as {
          version: number;
        };
        process.stdout.write(`${JSON.stringify({ id, version: found.version })}\n`);
        return 0;
      }
      case "list": {
        if (args.length > 1) throw new UsageError("usage: es-broker schemas list [SUBJECT]");
        const path =
          args.length === 0 ? `/subjects${deleted}` : `${subjectPath(args[0])}/versions${deleted}`;
        for (const item of (await call(base, "GET", path)) as unknown[])
          process.stdout.write(`${String(item)}\n`);
        return 0;
      }
      case "get": {
        if (values.id !== undefined) {
          need(0, "get --id ID");
          if (!/^\d+$/.test(values.id))
            throw new UsageError(`--id must be a schema id, got ${JSON.stringify(values.id)}`);
          process.stdout.write(
            `${JSON.stringify(await call(base, "GET", `/schemas/ids/${values.id}`))}\n`,
          );
          return 0;
        }
        if (args.length < 1 || args.length > 2)
          throw new UsageError("usage: es-broker schemas get SUBJECT [VERSION]");
        const version = encodeURIComponent(args[1] ?? "latest");
        process.stdout.write(
          `${JSON.stringify(await call(base, "GET", `${subjectPath(args[0])}/versions/${version}${deleted}`))}\n`,
        );
        return 0;
      }
      case "check": {
        need(2, "check SUBJECT FILE [--version V]");
        const [subject, file] = args;
        const input = readSchemaFile(file, values.type);
        const version =
          values.version === undefined ? "" : `/${encodeURIComponent(values.version)}`;
        const result = (await call(
          base,
          "POST",
          `/compatibility${subjectPath(subject)}/versions${version}?verbose=true`,
          input,
        )) as { is_compatible: boolean; messages?: string[] };
        if (result.is_compatible) {
          process.stdout.write("compatible\n");
          return 0;
        }
        process.stdout.write(
          `incompatible\n${(result.messages ?? []).map((m) => `  ${m}\n`).join("")}`,
        );
        return 1;
      }
      default:
        throw new UsageError(
          command === undefined
            ? "a subcommand is required: register, list, get or check"
            : `unknown subcommand ${JSON.stringify(command)} (register, list, get, check)`,
        );
    }
  } catch (err) {
    if (err instanceof RegistryCallError) {
      process.stderr.write(`es-broker: ${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
