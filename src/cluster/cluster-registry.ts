/**
 * The schema registry of a cluster, kept in etcd (docs/cluster.md "Schema registry and API keys
 * in etcd"): one registry for every broker, so a schema id means one schema everywhere.
 *
 * Keys under the cluster prefix (`keys.ts`):
 * - `registry/index`: `{"changes": [<token>, …], "state": …}`, the registry's state in the format
 *   of `schemas.json` (`registry/state.ts`) except that `schemas` holds `{id, schema_type}`
 *   only. etcd refuses requests over 1.5 MiB, so schema texts (up to `schemaBytesMax` each) do
 *   not go in it; the index is limited to {@link registryIndexBytesMax}.
 * - `registry/schemas/<id>`: `{id, schema_type, schema}`, written in the same transaction as the
 *   first index that names the id, and never changed or deleted: an id's schema is a function
 *   forever (a hard delete removes versions, never the id), so compiled validators are cached
 *   per id on every broker.
 *
 * Writes are read-modify-write (`SchemaRegistry` runs the change on the newest state it has,
 * then {@link ClusterRegistryStore.commit}): one transaction comparing the index's `mod_revision`
 * with the one the change was built on. If another broker wrote first, the transaction's failure
 * branch returns the newer index; the registry adopts it and runs the change again. An
 * `indeterminate` answer (the connection broke after sending) is settled by reading the index
 * back: each write adds a random token to `changes` (the last {@link changeTokensKept}), so its
 * presence says the write was applied. etcd unreachable: the write is refused (503, Confluent
 * error 50001) and nothing changed.
 *
 * Reads come from the broker's copy (`etcd-mirror.ts`, fed by a watch). To make a change
 * acknowledged on one broker visible to the next read on any other (linearizable reads), each
 * registry request and each produce refused for an unknown schema first calls
 * {@link ClusterRegistryStore.sync}: one `get` of the index; a newer one is taken with the
 * schemas it names before answering. While etcd is unreachable, reads are answered from the
 * copy (possibly stale by the changes made since it lost etcd; a read waits at most
 * {@link registrySyncWaitMaxMs} for an etcd that does not answer) and writes are refused.
 *
 * Layer rule: no `node:*`; time through {@link Clock}.
 */
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import {
  registryImportSchemasMax as importSchemasMax,
  registryIndexBytesMax,
  registrySyncWaitMaxMs,
  registryWriteBytesMax,
} from "../lib/limits.ts";
import { utf8 } from "../lib/bytes.ts";
import { quote } from "../lib/quote.ts";
import { RegistryError, RegistryErrors } from "../registry/errors.ts";
import { RegistryConflict, SchemaRegistry, type RegistryStore } from "../registry/registry.ts";
import { decodeState, emptyState, encodeState, type RegistryState } from "../registry/state.ts";
import { type Etcd, EtcdError, type EtcdKeyValue, type EtcdOp } from "./etcd.ts";
import { EtcdMirror } from "./etcd-mirror.ts";
import { registryIndexKey, registrySchemaKey } from "./keys.ts";

/** Tokens of recent writes kept in the index, to settle an `indeterminate` write by reading back. */
export const changeTokensKept = 32;

/** A broker's local `schemas.json` that cannot join the cluster's registry: the start is refused. */
export class RegistryJoinError extends Error {
  override name = "RegistryJoinError";
}

/** Options of {@link ClusterRegistryStore.open}. */
export interface ClusterRegistryOptions {
  etcd: Etcd;
  /** The cluster prefix, without a trailing slash. */
  prefix: string;
  clock: Clock;
  logger: Logger;
  /** A fresh random token (a few bytes, hex) per write. */
  randomToken(): string;
  /**
   * The data directory's own registry state (`schemas.json`) and the file's path: imported when
   * the cluster's registry is empty, else checked against it (module comment of `open`).
   */
  local?: { state: RegistryState; path: string };
}

interface Envelope {
  changes: string[];
  state: Record<string, unknown>;
}

/** See the module comment. */
export class ClusterRegistryStore implements RegistryStore {
  readonly where: string;
  readonly #o: ClusterRegistryOptions;
  readonly #indexKey: string;
  #mirror!: EtcdMirror;
  #registry: SchemaRegistry | null = null;
  /** The state decoded from the copy, and the index `mod_revision` it came from (0: no index). */
  #current: RegistryState = emptyState;
  #currentRevision = 0;
  #currentChanges: string[] = [];
  /** `mod_revision` of the index each state the registry may hold was decoded from. */
  readonly #revisionOf = new WeakMap<RegistryState, number>();
  /** Parsed `registry/schemas/<id>` values, by id (with the revision they were read at). */
  readonly #schemas = new Map<number, { modRevision: number; type: unknown; schema: unknown }>();
  #syncTail: Promise<void> = Promise.resolve();
  #syncWaiting: Promise<void> | null = null;

  private constructor(options: ClusterRegistryOptions) {
    this.#o = options;
    this.#indexKey = registryIndexKey(options.prefix);
    this.where = `etcd key ${this.#indexKey}`;
    this.#revisionOf.set(emptyState, 0);
  }

  /**
   * Reads the cluster's registry, starts watching it, and returns the registry every broker
   * request and produce check uses. The data directory's `schemas.json` (`options.local`), if it
   * holds schemas: imported as the cluster's registry if etcd has none yet (at most
   * {@link importSchemasMax} schemas); otherwise every id in it must name the same schema in the
   * cluster's registry (ids clients already encoded records with keep their meaning), or the
   * start is refused.
   * @throws RegistryJoinError (refusal, message names the fix); EtcdError if etcd fails.
   */
  static async open(
    options: ClusterRegistryOptions,
  ): Promise<{ store: ClusterRegistryStore; registry: SchemaRegistry }> {
    const store = new ClusterRegistryStore(options);
    store.#mirror = await EtcdMirror.start({
      etcd: options.etcd,
      prefix: `${options.prefix}/registry/`,
      clock: options.clock,
      logger: options.logger,
      name: "registry",
      onChange: () => store.#takeCopy(),
    });
    try {
      await store.#fetchMissingSchemas();
      store.#takeCopy();
      if (options.local !== undefined && options.local.state.schemas.size > 0)
        await store.#joinLocal(options.local.state, options.local.path);
      store.#registry = await SchemaRegistry.withStore({
        logger: options.logger,
        store,
        state: store.#current,
      });
    } catch (err) {
      await store.#mirror.close();
      throw err;
    }
    return { store, registry: store.#registry };
  }

  /** The `mod_revision` of the index the registry's state was read from (0 while there is none). */
  get revision(): number {
    return this.#currentRevision;
  }

  async commit(previous: RegistryState, next: RegistryState, action: string): Promise<void> {
    const seen = this.#revisionOf.get(previous);
    if (seen === undefined)
      throw new RegistryError(
        RegistryErrors.storeFailed,
        `${action}: the change was built on a state not read from etcd (internal error)`,
      );
    const { etcd } = this.#o;
    const token = this.#o.randomToken();
    const value = this.#encodeIndex(next, [token, ...this.#currentChanges], action);
    const success: EtcdOp[] = [{ put: { key: this.#indexKey, value } }];
    const added: EtcdKeyValue[] = [];
    for (const [id, entry] of next.schemas) {
      if (previous.schemas.has(id)) continue;
      const schemaValue = JSON.stringify({
        id,
        schema_type: entry.type,
        schema: entry.schema,
      });
      success.push({ put: { key: registrySchemaKey(this.#o.prefix, id), value: schemaValue } });
      added.push(kv(registrySchemaKey(this.#o.prefix, id), schemaValue, 0));
    }
    let bytes = 0;
    for (const op of success) if ("put" in op) bytes += utf8(op.put.value).length;
    if (bytes > registryWriteBytesMax)
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `${action}: the write to etcd would take ${bytes} bytes, over the limit of ${registryWriteBytesMax} bytes (registryWriteBytesMax: etcd refuses larger requests)`,
        { limit_bytes: registryWriteBytesMax },
      );
    let result;
    try {
      result = await etcd.txn({
        compare: [{ key: this.#indexKey, target: "mod_revision", result: "equal", number: seen }],
        success,
        failure: [{ get: { key: this.#indexKey } }],
      });
    } catch (err) {
      if (err instanceof EtcdError && err.code === "indeterminate")
        return this.#settle(token, seen, action, err);
      throw this.#unreachable(action, err);
    }
    if (result.succeeded) {
      for (const schema of added) this.#mirror.absorb({ ...schema, modRevision: result.revision });
      this.#mirror.absorb(kv(this.#indexKey, value, result.revision));
      return;
    }
    const newer = result.reads[0]?.[0];
    if (newer !== undefined) this.#mirror.absorb(newer);
    await this.#fetchMissingSchemas().catch((e) => {
      throw this.#unreachable(action, e);
    });
    throw new RegistryConflict(`${action}: another broker changed the registry first`);
  }

  /** After an `indeterminate` write: read the index back and decide by the write's token. */
  async #settle(token: string, seen: number, action: string, cause: EtcdError): Promise<void> {
    let index: EtcdKeyValue | null;
    try {
      index = await this.#o.etcd.get(this.#indexKey);
    } catch (err) {
      throw new RegistryError(
        RegistryErrors.storeFailed,
        `${action}: the outcome is unknown (etcd's answer was lost: ${errorMessage(cause)}; reading it back failed: ${errorMessage(err)}); read the registry to see whether the change was made`,
      );
    }
    if (index !== null) this.#mirror.absorb(index);
    await this.#fetchMissingSchemas().catch(() => {});
    const changes = index === null ? [] : this.#envelope(index.value).changes;
    if (changes.includes(token)) return; // applied: the copy now holds it
    if ((index?.modRevision ?? 0) === seen || changes.length < changeTokensKept)
      throw new RegistryConflict(`${action}: the write was not applied; running it again`);
    throw new RegistryError(
      RegistryErrors.storeFailed,
      `${action}: the outcome is unknown (etcd's answer was lost: ${errorMessage(cause)}, and the registry changed ${changeTokensKept} times since); read the registry to see whether the change was made`,
    );
  }

  #unreachable(action: string, err: unknown): RegistryError {
    this.#o.logger.log("warn", "registry.etcd_failed", { error: errorMessage(err) });
    return new RegistryError(
      RegistryErrors.storeFailed,
      `${action}: the cluster's schema registry in etcd cannot be written, the change was not made: ${errorMessage(err)}`,
    );
  }

  sync(): Promise<void> {
    // Every caller gets a read that starts after its call; callers waiting together share one.
    let run = this.#syncWaiting;
    if (run === null) {
      run = this.#syncTail.then(() => {
        this.#syncWaiting = null;
        return this.#syncOnce();
      });
      this.#syncWaiting = run;
      this.#syncTail = run;
    }
    // An etcd that does not answer (a stopped member) delays a read by at most this much.
    let timer: { cancel(): void } | undefined;
    const late = new Promise<void>((resolve) => {
      timer = this.#o.clock.setTimer(registrySyncWaitMaxMs, resolve);
    });
    return Promise.race([run, late]).finally(() => timer?.cancel());
  }

  async #syncOnce(): Promise<void> {
    try {
      const index = await this.#o.etcd.get(this.#indexKey);
      if (index === null || index.modRevision <= this.#currentRevision) return;
      this.#mirror.absorb(index);
      await this.#fetchMissingSchemas();
      this.#takeCopy();
    } catch (err) {
      this.#o.logger.log("debug", "registry.sync_failed", { error: errorMessage(err) });
    }
  }

  /** Stops the watch. */
  async close(): Promise<void> {
    await this.#mirror.close();
  }

  /** Reads the schema keys the copy's index names but the copy lacks (absorbed before them). */
  async #fetchMissingSchemas(): Promise<void> {
    const index = this.#mirror.get(this.#indexKey);
    if (index === undefined) return;
    const ids = this.#indexIds(index.value);
    for (const id of ids) {
      const key = registrySchemaKey(this.#o.prefix, id);
      if (this.#mirror.get(key) !== undefined) continue;
      const found = await this.#o.etcd.get(key);
      if (found !== null) this.#mirror.absorb(found);
    }
  }

  #indexIds(value: string): number[] {
    const schemas = this.#envelope(value).state.schemas;
    if (!Array.isArray(schemas)) return [];
    return schemas
      .map((s) => (s as { id?: unknown }).id)
      .filter((id): id is number => Number.isSafeInteger(id));
  }

  #envelope(value: string): Envelope {
    const parsed = JSON.parse(value) as Partial<Envelope> | null;
    if (
      parsed === null ||
      typeof parsed !== "object" ||
      !Array.isArray(parsed.changes) ||
      typeof parsed.state !== "object" ||
      parsed.state === null
    )
      throw new Error(`${this.#indexKey} is not {"changes": [...], "state": {...}}`);
    return parsed as Envelope;
  }

  #encodeIndex(state: RegistryState, changes: string[], action: string): string {
    const full = encodeState(state) as Record<string, unknown>;
    const schemas = [...state.schemas.values()].map((s) => ({ id: s.id, schema_type: s.type }));
    const value = JSON.stringify({
      changes: changes.slice(0, changeTokensKept),
      state: { ...full, schemas },
    });
    if (value.length > registryIndexBytesMax)
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `${action}: the cluster's registry index would take ${value.length} bytes, over the limit of ${registryIndexBytesMax} bytes (registryIndexBytesMax: etcd refuses larger requests)`,
        { limit_bytes: registryIndexBytesMax },
      );
    return value;
  }

  /**
   * Decodes the copy and hands a newer state to the registry. A copy whose index names a schema
   * key not yet in it is left for later (the key is being fetched, or comes with the same watch
   * revision); a copy that breaks an invariant is logged and not taken.
   */
  #takeCopy(): void {
    const index = this.#mirror.get(this.#indexKey);
    if (index === undefined || index.modRevision <= this.#currentRevision) return;
    let state: RegistryState;
    let envelope: Envelope;
    try {
      envelope = this.#envelope(index.value);
      const schemas: unknown[] = [];
      for (const id of this.#indexIds(index.value)) {
        const key = registrySchemaKey(this.#o.prefix, id);
        const schemaKv = this.#mirror.get(key);
        if (schemaKv === undefined) return; // not here yet
        let parsed = this.#schemas.get(id);
        if (parsed === undefined || parsed.modRevision !== schemaKv.modRevision) {
          const value = JSON.parse(schemaKv.value) as { schema_type?: unknown; schema?: unknown };
          parsed = {
            modRevision: schemaKv.modRevision,
            type: value.schema_type,
            schema: value.schema,
          };
          this.#schemas.set(id, parsed);
        }
        schemas.push({ id, schema_type: parsed.type, schema: parsed.schema });
      }
      state = decodeState({ ...envelope.state, schemas });
    } catch (err) {
      this.#o.logger.log("error", "registry.bad_index", {
        key: this.#indexKey,
        mod_revision: index.modRevision,
        error: errorMessage(err),
      });
      return;
    }
    this.#current = state;
    this.#currentRevision = index.modRevision;
    this.#currentChanges = envelope.changes.filter((c) => typeof c === "string");
    this.#revisionOf.set(state, index.modRevision);
    this.#registry?.adopt(state);
  }

  /** Imports or checks the data directory's own registry (see {@link open}). */
  async #joinLocal(local: RegistryState, path: string): Promise<void> {
    const { logger } = this.#o;
    if (this.#currentRevision === 0) {
      if (local.schemas.size > importSchemasMax)
        throw new RegistryJoinError(
          `Cannot import ${path} into the cluster's schema registry: it holds ${local.schemas.size} schemas, more than the ${importSchemasMax} one import takes (one etcd transaction). Register them again through any broker after moving the file away (they get the cluster's ids), or keep this broker out of the cluster`,
        );
      const value = this.#encodeIndex(local, [this.#o.randomToken()], `Cannot import ${path}`);
      const success: EtcdOp[] = [{ put: { key: this.#indexKey, value } }];
      for (const entry of local.schemas.values())
        success.push({
          put: {
            key: registrySchemaKey(this.#o.prefix, entry.id),
            value: JSON.stringify({ id: entry.id, schema_type: entry.type, schema: entry.schema }),
          },
        });
      let bytes = 0;
      for (const op of success) if ("put" in op) bytes += utf8(op.put.value).length;
      if (bytes > registryWriteBytesMax)
        throw new RegistryJoinError(
          `Cannot import ${path} into the cluster's schema registry: it takes ${bytes} bytes, more than the ${registryWriteBytesMax} one import takes (one etcd transaction). Register its schemas again through any broker after moving the file away (they get the cluster's ids), or keep this broker out of the cluster`,
        );
      const result = await this.#o.etcd.txn({
        compare: [{ key: this.#indexKey, target: "version", result: "equal", number: 0 }],
        success,
      });
      if (result.succeeded) {
        // The watch brings the keys; read them now so the registry starts with them.
        const index = await this.#o.etcd.get(this.#indexKey);
        if (index !== null) this.#mirror.absorb(index);
        await this.#fetchMissingSchemas();
        this.#takeCopy();
        logger.log("info", "registry.imported", { file: path, schemas: local.schemas.size });
        return;
      }
      await this.#syncOnce();
    }
    const cluster = this.#current;
    for (const entry of local.schemas.values()) {
      const there = cluster.schemas.get(entry.id);
      if (there !== undefined && there.type === entry.type && there.schema === entry.schema)
        continue;
      throw new RegistryJoinError(
        `Cannot join the cluster's schema registry: ${path} gives schema id ${entry.id} to a schema that ${there === undefined ? "the cluster's registry does not have" : "differs from the cluster's schema of that id"}; a schema id must mean one schema on every broker. Move ${path} away and register its schemas again through any broker (they get the cluster's ids), or import it by starting this broker first on an empty etcd`,
      );
    }
    logger.log("info", "registry.local_file_ignored", {
      file: path,
      reason: `cluster mode: the registry is kept in etcd; every schema id of the file means the same schema there (${quote(this.#indexKey)})`,
    });
  }
}

function kv(key: string, value: string, modRevision: number): EtcdKeyValue {
  return { key, value, createRevision: modRevision, modRevision, version: 1, lease: "0" };
}
