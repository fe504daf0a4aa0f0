/**
 * Schema id translation for the mirror (docs/edge.md "Schema ids upstream"). A Confluent-framed
 * key or value (magic byte 0, the schema id as 4 bytes big-endian, the payload) names a schema by
 * its id in the edge's registry; ids are local to each registry (docs/registry.md "Identity,
 * versions and deletion"), so the same schema has another id upstream, and an edge id may name
 * another schema there. Before a batch of such records is forwarded, each distinct edge id is
 * looked up in the edge's registry and found, or registered, under the same subject in the
 * upstream's registry (Confluent's HTTP API), and every record's id is rewritten to the
 * upstream's. A record whose id could not be translated is never forwarded.
 */
import { errorMessage } from "../lib/errors.ts";

/** The edge's own registry, as the mirror reads it. */
export interface EdgeSchemas {
  /**
   * The schema of edge id `id` while some version (live or soft-deleted) uses it; null when the
   * registry holds no such id. @throws Error when the edge's registry is unavailable.
   */
  schemaById(id: number): { schemaType: string; schema: string } | null;
}

/** One answer of the upstream registry: the HTTP status and the parsed JSON body (null if none). */
export interface RegistryAnswer {
  status: number;
  body: unknown;
}

/** The upstream's registry over HTTP(S) (`--mirror-registry-url`, with the mirror's key and TLS). */
export interface UpstreamRegistry {
  /** The registry's base URL, for messages (never holds a secret). */
  readonly url: string;
  /**
   * One request: `path` is appended to the base URL (`/subjects/s/versions`), `body` sent as JSON.
   * @throws Error when no answer came (connection refused or lost, TLS failure, time limit).
   */
  post(path: string, body: unknown): Promise<RegistryAnswer>;
}

/**
 * Why an id could not be translated. `stop`: the partition stops (a refusal that an operator must
 * resolve: incompatible schema, no registry given, an id the edge does not hold). `refused`: the
 * mirror's key may not register the schema upstream (it waits, like a refused topic create).
 * `unreachable`: no answer, or the registry is unavailable (it waits and tries again).
 */
export class SchemaTranslationError extends Error {
  override name = "SchemaTranslationError";
  constructor(
    readonly kind: "stop" | "refused" | "unreachable",
    message: string,
  ) {
    super(message);
  }
}

/** The parts of a topic's records that carry Confluent framing, by subject. */
export interface FramedParts {
  key?: string;
  value?: string;
}

/**
 * Which parts of a topic's records are Confluent-framed (docs/registry.md "Produce-time
 * validation"): those with a subject while `schema_format` is `confluent` (the default); null when
 * none (no subject, or `json`: plain JSON text, forwarded unchanged).
 */
export function framedParts(config: {
  key_schema_subject?: string;
  value_schema_subject?: string;
  schema_format?: string;
}): FramedParts | null {
  if ((config.schema_format ?? "confluent") !== "confluent") return null;
  const parts: FramedParts = {};
  if (typeof config.key_schema_subject === "string") parts.key = config.key_schema_subject;
  if (typeof config.value_schema_subject === "string") parts.value = config.value_schema_subject;
  return parts.key === undefined && parts.value === undefined ? null : parts;
}

/**
 * The upstream subject of the edge subject `subject` of local topic `topic`, forwarded to upstream
 * topic `remote` (`--mirror-rename`; docs/edge.md "Schema ids upstream"). Under Kafka's
 * TopicNameStrategy a subject is its topic's name with `-key` or `-value`: `<topic>-key` and
 * `<topic>-value` become `<remote>-key` and `<remote>-value`, so the schema lands where the upstream
 * topic's serializers and checks look. Any other subject (a record name, one shared by topics)
 * names no topic and is kept.
 */
export function upstreamSubject(subject: string, topic: string, remote: string): string {
  if (remote === topic) return subject;
  for (const suffix of ["-key", "-value"]) if (subject === topic + suffix) return remote + suffix;
  return subject;
}

/** The schema id a Confluent-framed key or value names, or null when it is not framed (too short, another magic byte). */
export function framedId(bytes: Uint8Array | null): number | null {
  if (bytes === null || bytes.length < 5 || bytes[0] !== 0) return null;
  return ((bytes[1] << 24) >>> 0) + (bytes[2] << 16) + (bytes[3] << 8) + bytes[4];
}

/** A copy of framed `bytes` naming schema `id` instead (the input, a view of the edge log, is never changed). */
export function withId(bytes: Uint8Array, id: number): Uint8Array {
  const out = bytes.slice();
  out[1] = (id >>> 24) & 0xff;
  out[2] = (id >>> 16) & 0xff;
  out[3] = (id >>> 8) & 0xff;
  out[4] = id & 0xff;
  return out;
}

/** The Confluent error code and message of a registry answer that is not 2xx. */
function refusal(answer: RegistryAnswer): { code: number | null; message: string } {
  const b = answer.body as { error_code?: unknown; message?: unknown } | null;
  const code = typeof b?.error_code === "number" ? b.error_code : null;
  const message = typeof b?.message === "string" ? b.message : `HTTP ${answer.status}`;
  return { code, message: code === null ? message : `${message} (error_code ${code})` };
}

/**
 * Translates edge schema ids to the upstream's, per subject, with a cache: an id never changes
 * meaning within one registry, so a mapping found once holds for this upstream for good (one
 * translator per mirror, kept in memory only).
 */
export class SchemaIdTranslator {
  #edge: EdgeSchemas;
  #upstream: UpstreamRegistry | null;
  /** "subject\nedge id" → upstream id. */
  #ids = new Map<string, number>();

  /** `upstream` null: no `--mirror-registry-url`, so every framed record stops its partition. */
  constructor(edge: EdgeSchemas, upstream: UpstreamRegistry | null) {
    this.#edge = edge;
    this.#upstream = upstream;
  }

  /**
   * The upstream id of the schema that is edge id `edgeId`, under `subject` (found there, or
   * registered). `where` names the records for messages (`topic "t" partition 0 value`).
   * @throws SchemaTranslationError (see its kinds); its message names the subject and the edge id.
   */
  async upstreamId(subject: string, edgeId: number, where: string): Promise<number> {
    const cacheKey = `${subject}\n${edgeId}`;
    const cached = this.#ids.get(cacheKey);
    if (cached !== undefined) return cached;
    const what = `subject "${subject}", edge schema id ${edgeId}`;
    const upstream = this.#upstream;
    if (upstream === null)
      throw new SchemaTranslationError(
        "stop",
        `${where} carries schema ids of the edge's registry (${what}), which mean other schemas upstream: start the edge with --mirror-registry-url URL (the upstream's registry) so that the mirror translates them, or with --mirror-keep-schema-ids if both registries give every schema the same id; nothing untranslated is forwarded`,
      );
    let schema: { schemaType: string; schema: string } | null;
    try {
      schema = this.#edge.schemaById(edgeId);
    } catch (err) {
      throw new SchemaTranslationError(
        "unreachable",
        `cannot read ${what} in the edge's registry: ${errorMessage(err)}`,
      );
    }
    if (schema === null)
      throw new SchemaTranslationError(
        "stop",
        `${where} names ${what}, which the edge's registry does not hold (deleted permanently, or the record was stored before the topic named the subject): it cannot be translated, and nothing untranslated is forwarded`,
      );
    const body = { schema: schema.schema, schemaType: schema.schemaType };
    const path = `/subjects/${encodeURIComponent(subject)}`;
    const ask = async (suffix: string): Promise<RegistryAnswer> => {
      try {
        return await upstream.post(path + suffix, body);
      } catch (err) {
        throw new SchemaTranslationError(
          "unreachable",
          `cannot reach the upstream registry at ${upstream.url} to translate ${what}: ${errorMessage(err)}`,
        );
      }
    };
    // Find it first: a key without the admin role may read the registry but not register.
    const found = await ask("");
    let id: unknown;
    if (found.status >= 200 && found.status < 300) id = (found.body as { id?: unknown } | null)?.id;
    else {
      const r = refusal(found);
      if (r.code !== 40401 && r.code !== 40403) this.#fail(found, what, upstream, "look up");
      const registered = await ask("/versions");
      if (registered.status < 200 || registered.status >= 300)
        this.#fail(registered, what, upstream, "register");
      id = (registered.body as { id?: unknown } | null)?.id;
    }
    if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id > 0xffffffff)
      throw new SchemaTranslationError(
        "stop",
        `the upstream registry at ${upstream.url} answered no schema id for ${what} (${JSON.stringify(id)}): is --mirror-registry-url a schema registry (the upstream's HTTP port and /registry)?`,
      );
    this.#ids.set(cacheKey, id);
    return id;
  }

  /** @throws SchemaTranslationError for a refusal of `operation` by the upstream registry. */
  #fail(
    answer: RegistryAnswer,
    what: string,
    upstream: UpstreamRegistry,
    operation: string,
  ): never {
    const r = refusal(answer);
    const said = `the upstream registry at ${upstream.url} refused to ${operation} ${what}: ${r.message}`;
    if (answer.status === 401 || answer.status === 403)
      throw new SchemaTranslationError(
        "refused",
        `${said} (register the schema under that subject upstream, or give the mirror's key the admin role there)`,
      );
    if (answer.status >= 500 || answer.status === 408 || answer.status === 429)
      throw new SchemaTranslationError("unreachable", said);
    if (answer.status === 404 && r.code === null)
      throw new SchemaTranslationError(
        "stop",
        `${said} (is --mirror-registry-url the upstream's registry: its HTTP port and /registry?)`,
      );
    throw new SchemaTranslationError("stop", said);
  }
}
