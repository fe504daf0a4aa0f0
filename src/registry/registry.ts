/**
 * The schema registry: subjects, their versions, global schema ids, compatibility levels, and the
 * produce-time check of records against them (docs/registry.md). Its HTTP face is Confluent's
 * Schema Registry API (`transport/http/registry/`); the broker calls {@link SchemaRegistry.checkBatch}
 * on every produce to a topic whose config names a subject.
 *
 * State lives in `<dataDir>/schemas.json` (`state.ts`), written whole through the atomic
 * metadata writer (`storage/metadata.ts`) by every change, one change at a time. The new state
 * is swapped in only once the file is durable, so nothing reads (and no produce is checked
 * against) a state a crash could take back, and a change whose write fails does not take effect —
 * an id it picked is not consumed (if the write failed after the rename, a restart may find the
 * change made: never answered, like a change cut off by a crash). After a crash the file holds the state before or after the
 * change in flight. A file that is unreadable or breaks an invariant makes the registry
 * unavailable (every call throws `unavailable` naming the file and the reason; produces to
 * topics with a subject fail closed), never empty; the file is left as it is.
 *
 * In cluster mode the state is kept in etcd instead, behind a {@link RegistryStore}
 * (`cluster/cluster-registry.ts`): a change is read-modify-write on the store's newest state,
 * run again after a {@link RegistryConflict}, and the store hands newer states to
 * {@link SchemaRegistry.adopt}.
 *
 * Decisions where Confluent's behaviour is loose (docs/registry.md "Identity, versions and deletion"):
 * - The same schema (same type and canonical text, `canonical.ts`) has one id everywhere: under
 *   every subject, and again after its versions were deleted permanently.
 * - Registering a schema that is a live version of the subject returns that version, unchanged,
 *   without a compatibility check; one that is only a soft-deleted version becomes a new version.
 * - Version numbers continue after soft deletes; once a subject has no version left (deleted
 *   permanently), it is gone with its compatibility level, and numbering starts at 1 again.
 * - A refused registration consumes no id and no version.
 */
import { quote } from "../lib/quote.ts";
import type { Logger } from "../lib/logger.ts";
import {
  schemasFileBytesMax,
  schemaValidatorsCachedMax,
  schemaWireHeaderBytes,
  subjectCharsMax,
} from "../lib/limits.ts";
import { Mutex } from "../lib/mutex.ts";
import { errorMessage } from "../lib/errors.ts";
import { utf8 } from "../lib/bytes.ts";
import { joinPath, type FileSystem } from "../fs/types.ts";
import { readJsonFile, writeFileAtomic } from "../storage/metadata.ts";
import { EntryCursor, type EntryBatch } from "../storage/record.ts";
import type { ValueFailure } from "./avro.ts";
import {
  type CompatibilityLevel,
  compatibilityDefault,
  incompatibilities,
  isTransitive,
  type VersionToCompare,
} from "./compatibility.ts";
import { RegistryError, RegistryErrors } from "./errors.ts";
import { loadSchemaLibraries } from "./libraries.ts";
import {
  type ParsedSchema,
  parseSchema,
  parseSchemaType,
  type SchemaType,
  schemaTypes,
  valueChecker,
} from "./schema.ts";
import {
  decodeState,
  emptyState,
  encodeState,
  type RegistryState,
  type SubjectEntry,
  type VersionEntry,
} from "./state.ts";

/** Name of the registry's file in the data directory. */
export const schemasFileName = "schemas.json";

/** Options of {@link SchemaRegistry.open}. */
export interface SchemaRegistryOptions {
  fs: FileSystem;
  /** The data directory (it must exist: the broker creates it); the registry's file is `<dataDir>/schemas.json`. */
  dataDir: string;
  logger: Logger;
}

/** A schema as a request carries it. */
export interface SchemaInput {
  /** The schema text (JSON). */
  schema: unknown;
  /** "AVRO" (default) or "JSON". */
  schemaType?: unknown;
  /** Schema references: not supported; a non-empty list is refused (42201). */
  references?: unknown;
}

/** One version of a subject, as the API shows it. */
export interface SubjectVersion {
  subject: string;
  version: number;
  id: number;
  schemaType: SchemaType;
  schema: string;
  deleted: boolean;
}

/** How produce checks one part (key or value) of each record. */
export interface PartRule {
  /** The subject whose versions a value must match. */
  subject: string;
  /**
   * `confluent`: the Confluent wire format — magic byte 0, the schema id (u32 big-endian) of a
   * live version of the subject, then the value in that schema's encoding (Avro binary, or JSON
   * text for a JSON schema), which must decode or validate. `json`: plain JSON text, valid under
   * the subject's latest live version (a JSON schema).
   */
  format: "confluent" | "json";
}

/** What produce checks: the key, the value, or both. */
export interface RecordRules {
  key?: PartRule;
  value?: PartRule;
}

/** Why a record of a produce was refused. */
export interface RecordRejection {
  /** 0-based index of the record in the request. */
  recordIndex: number;
  part: "key" | "value";
  subject: string;
  /** The schema id the record named or was checked with; null if none could be read. */
  schemaId: number | null;
  /** That schema's version under the subject; null if it is not a live version of it. */
  version: number | null;
  /** JSON Pointer-like path of the failing field inside the value ("" = the whole value); null if the value was not decoded. */
  path: string | null;
  reason: string;
}

/** A cached, parsed schema by id with its produce-time check. */
interface CompiledSchema {
  parsed: ParsedSchema;
  check: (bytes: Uint8Array) => ValueFailure | null;
}

/** Per subject, for produce: live versions by id, and the latest live one. */
interface SubjectIndex {
  byId: Map<number, number>;
  deletedById: Map<number, number>;
  latest: VersionEntry | null;
}

/**
 * Where a registry's state is kept when it is not the data directory's `schemas.json`: in
 * cluster mode, etcd (`cluster/cluster-registry.ts`, docs/cluster.md "Schema registry and API
 * keys in etcd"). The store hands the registry every newer state it learns of through
 * {@link SchemaRegistry.adopt}.
 */
export interface RegistryStore {
  /** Where the state is, for messages (e.g. "etcd key /es-broker/registry/index"). */
  readonly where: string;
  /**
   * Makes `next` the stored state. `previous` is the registry's current state, the one `next`
   * was built from. Before resolving, the store has made the registry adopt `next` (or a newer
   * state holding it).
   * @throws RegistryConflict when the stored state is no longer `previous`: the registry has
   *   adopted the newer one, and runs the change again on it. RegistryError store_failed (the
   *   change is not in effect, or its outcome is unknown: said in the message) or unavailable.
   */
  commit(previous: RegistryState, next: RegistryState, action: string): Promise<void>;
  /**
   * Makes the registry adopt every change the store acknowledged before this call (one read of
   * the store). Never rejects: when the store cannot be reached, the registry answers from the
   * state it has (docs/cluster.md says how stale it can be).
   */
  sync(): Promise<void>;
}

/**
 * Thrown by {@link RegistryStore.commit} when another writer changed the stored state first; the
 * registry has already adopted the newer state and runs the change again.
 */
export class RegistryConflict extends Error {
  override name = "RegistryConflict";
}

/** How many times in a row a change is run again after a {@link RegistryConflict} before giving up. */
const conflictRetriesMax = 64;

/** The schema registry of one data directory, or of a cluster (a {@link RegistryStore}). See the module comment. */
export class SchemaRegistry {
  #fs: FileSystem | null;
  #path: string;
  #store: RegistryStore | null;
  #logger: Logger;
  #state: RegistryState = emptyState;
  /** `${type}\n${canonical}` → id, over every schema ever assigned an id. */
  #byContent = new Map<string, number>();
  #subjectIndexes = new Map<string, SubjectIndex>();
  #compiled = new Map<number, CompiledSchema>();
  /** Why the registry cannot be used (its file is unreadable), or null. */
  #unavailable: string | null = null;
  #closed = false;
  #writes = new Mutex();

  private constructor(
    options: SchemaRegistryOptions | { logger: Logger; store: RegistryStore; state: RegistryState },
  ) {
    if ("store" in options) {
      this.#fs = null;
      this.#store = options.store;
      this.#path = options.store.where;
      this.#install(options.state);
    } else {
      this.#fs = options.fs;
      this.#store = null;
      this.#path = joinPath(options.dataDir, schemasFileName);
    }
    this.#logger = options.logger;
  }

  /**
   * A registry whose state is kept in `store` rather than in a file (cluster mode), starting
   * from `state` (the store's current one). Every schema in it must compile synchronously, so
   * the schema libraries are loaded first.
   */
  static async withStore(options: {
    logger: Logger;
    store: RegistryStore;
    state: RegistryState;
  }): Promise<SchemaRegistry> {
    await loadSchemaLibraries();
    return new SchemaRegistry(options);
  }

  /**
   * Takes a newer state from the registry's store (the watch of the cluster's registry in etcd
   * saw another broker's change). Compiled validators stay: an id's schema never changes.
   */
  adopt(state: RegistryState): void {
    if (this.#store === null) throw new Error("adopt() is only for a registry with a store");
    this.#install(state);
  }

  /** The current state (immutable). */
  get state(): RegistryState {
    return this.#state;
  }

  /**
   * Brings the registry up to date with its store before a read that must see every change
   * acknowledged anywhere before it (cluster mode: one etcd read; single node: nothing to do).
   * Never rejects.
   */
  sync(): Promise<void> {
    return this.#store === null ? Promise.resolve() : this.#store.sync();
  }

  /** True when {@link sync} may change what the registry answers (its state is kept elsewhere). */
  get shared(): boolean {
    return this.#store !== null;
  }

  /**
   * Loads `<dataDir>/schemas.json` (absent: an empty registry; nothing is written until the first
   * change). An unreadable or inconsistent file is logged (`registry.unavailable`) and makes the
   * registry unavailable; it never throws for it.
   */
  static async open(options: SchemaRegistryOptions): Promise<SchemaRegistry> {
    const registry = new SchemaRegistry(options);
    const read = await readJsonFile(options.fs, registry.#path);
    if ("missing" in read) return registry;
    let reason: string;
    if ("value" in read) {
      try {
        const state = decodeState(read.value);
        // Every stored schema must compile synchronously when a produce first needs it.
        if (state.schemas.size > 0) await loadSchemaLibraries();
        registry.#install(state);
        return registry;
      } catch (err) {
        reason = errorMessage(err);
      }
    } else reason = read.error;
    registry.#unavailable = `${registry.#path}: ${reason}`;
    options.logger.log("error", "registry.unavailable", { file: registry.#path, reason });
    return registry;
  }

  /** Null when the registry serves requests, else why it cannot (its file is unreadable). */
  get unavailableReason(): string | null {
    return this.#unavailable;
  }

  /** The schema types the registry takes (`GET /schemas/types`). */
  schemaTypes(): string[] {
    return [...schemaTypes];
  }

  /** Refuses every call once closed or while the file is unreadable. */
  #checkAvailable(): void {
    if (this.#closed)
      throw new RegistryError(RegistryErrors.unavailable, "The schema registry is shutting down");
    if (this.#unavailable !== null)
      throw new RegistryError(
        RegistryErrors.unavailable,
        `The schema registry is unavailable: ${this.#unavailable}`,
      );
  }

  #install(state: RegistryState): void {
    this.#state = state;
    this.#byContent = new Map(
      [...state.schemas.values()].map((s) => [contentKey(s.type, s.schema), s.id]),
    );
    this.#subjectIndexes.clear();
  }

  /**
   * Writes `state` durably, then makes it the current one.
   * @throws RegistryError store_failed: the current state stays; the file holds it, or (a failure
   *   after the rename, e.g. of the directory's fsync) the new one, which a restart would load.
   */
  async #commit(state: RegistryState, action: string): Promise<void> {
    if (this.#store !== null) {
      // The store adopts the new state itself (the registry reads it from there).
      await this.#store.commit(this.#state, state, action);
      return;
    }
    const bytes = utf8(`${JSON.stringify(encodeState(state), null, 1)}\n`);
    if (bytes.length > schemasFileBytesMax)
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `${action}: the registry would take ${bytes.length} bytes, over the limit of ${schemasFileBytesMax} bytes for ${schemasFileName} (schemasFileBytesMax)`,
        { limit_bytes: schemasFileBytesMax },
      );
    try {
      await writeFileAtomic(this.#fs!, this.#path, bytes);
    } catch (err) {
      this.#logger.log("error", "registry.write_failed", {
        file: this.#path,
        error: errorMessage(err),
      });
      throw new RegistryError(
        RegistryErrors.storeFailed,
        `${action}: writing ${schemasFileName} failed, the change did not take effect (should the failure have come after the file was replaced, a restart may find it made): ${errorMessage(err)}`,
      );
    }
    this.#install(state);
  }

  /**
   * Runs a change alone (changes are serialised; reads never wait). With a store, the change
   * starts from the store's newest state and runs again on a newer one after a
   * {@link RegistryConflict} (read-modify-write: `fn` reads the state and commits once).
   */
  #change<T>(fn: () => Promise<T>): Promise<T> {
    return this.#writes.run(async () => {
      this.#checkAvailable();
      if (this.#store === null) return fn();
      await this.#store.sync();
      for (let attempt = 1; ; attempt++) {
        try {
          return await fn();
        } catch (err) {
          if (!(err instanceof RegistryConflict)) throw err;
          if (attempt >= conflictRetriesMax)
            throw new RegistryError(
              RegistryErrors.storeFailed,
              `The change was not made: other brokers changed the registry first ${attempt} times in a row; try again`,
            );
          this.#checkAvailable();
        }
      }
    });
  }

  /** The parsed schema of `id` (cached). @throws RegistryError schema_not_found; unavailable if the stored text no longer parses. */
  #compiledSchema(id: number): CompiledSchema {
    const cached = this.#compiled.get(id);
    if (cached !== undefined) return cached;
    const entry = this.#state.schemas.get(id);
    if (entry === undefined)
      throw new RegistryError(RegistryErrors.schemaNotFound, `Cannot find schema id ${id}`);
    let parsed: ParsedSchema;
    try {
      parsed = parseSchema(entry.type, entry.schema, `Cannot load schema id ${id}`);
    } catch (err) {
      throw new RegistryError(
        RegistryErrors.unavailable,
        `The stored schema id ${id} in ${this.#path} is invalid: ${errorMessage(err)}`,
      );
    }
    return this.#cache(id, parsed);
  }

  #cache(id: number, parsed: ParsedSchema): CompiledSchema {
    const compiled = { parsed, check: valueChecker(parsed) };
    if (this.#compiled.size >= schemaValidatorsCachedMax) {
      const oldest = this.#compiled.keys().next().value;
      if (oldest !== undefined) this.#compiled.delete(oldest);
    }
    this.#compiled.set(id, compiled);
    return compiled;
  }

  // ---- registration and lookup ----

  /**
   * Registers `input` under `subject` (`POST /subjects/{subject}/versions`): see the module
   * comment for identity and versions; a new version must pass the subject's compatibility level.
   * @returns the schema's id and its version under the subject.
   * @throws RegistryError invalid_schema, incompatible_schema (with `details.reasons`),
   *   store_failed, unavailable.
   */
  async register(subject: string, input: SchemaInput): Promise<{ id: number; version: number }> {
    this.#checkAvailable();
    const action = `Cannot register a schema under subject ${quote(subject)}`;
    checkSubject(subject, action);
    await loadSchemaLibraries();
    const candidate = parseInput(input, action);
    return this.#change(async () => {
      const state = this.#state;
      const key = contentKey(candidate.type, candidate.canonical);
      const knownId = this.#byContent.get(key);
      const entry = state.subjects.get(subject);
      const live = entry?.versions.filter((v) => !v.deleted) ?? [];
      const same = knownId === undefined ? undefined : live.find((v) => v.id === knownId);
      if (same !== undefined) return { id: same.id, version: same.version };
      const level = this.#level(subject);
      const reasons = incompatibilities(candidate, this.#compareWith(live, level), level);
      if (reasons.length > 0)
        throw new RegistryError(
          RegistryErrors.incompatibleSchema,
          `${action}: the schema is incompatible with an earlier version (level ${level}): ${reasons.join("; ")}`,
          { reasons },
        );
      const id = knownId ?? state.nextId;
      const version = entry?.nextVersion ?? 1;
      const schemas = new Map(state.schemas);
      if (knownId === undefined)
        schemas.set(id, { id, type: candidate.type, schema: candidate.canonical });
      const subjects = new Map(state.subjects);
      subjects.set(subject, {
        name: subject,
        nextVersion: version + 1,
        versions: [...(entry?.versions ?? []), { version, id, deleted: false }],
      });
      await this.#commit(
        { ...state, nextId: knownId === undefined ? id + 1 : state.nextId, schemas, subjects },
        action,
      );
      if (!this.#compiled.has(id)) this.#cache(id, candidate);
      this.#logger.log("info", "registry.registered", { subject, id, version });
      return { id, version };
    });
  }

  /** The versions a level compares a new schema with: every live one (transitive) or the latest. */
  #compareWith(live: readonly VersionEntry[], level: CompatibilityLevel): VersionToCompare[] {
    const chosen = level === "NONE" ? [] : isTransitive(level) ? live : live.slice(-1);
    return chosen.map((v) => ({ version: v.version, schema: this.#compiledSchema(v.id).parsed }));
  }

  /**
   * Finds `input` among the versions of `subject` (`POST /subjects/{subject}`); soft-deleted
   * versions only with `deleted`.
   * @throws RegistryError subject_not_found, schema_not_found, invalid_schema, unavailable.
   */
  async lookup(
    subject: string,
    input: SchemaInput,
    options: { deleted?: boolean } = {},
  ): Promise<SubjectVersion> {
    this.#checkAvailable();
    await loadSchemaLibraries();
    const action = `Cannot look up a schema under subject ${quote(subject)}`;
    const entry = this.#subject(subject, action, options.deleted === true);
    const candidate = parseInput(input, action);
    const id = this.#byContent.get(contentKey(candidate.type, candidate.canonical));
    const found = [...entry.versions]
      .reverse()
      .find((v) => v.id === id && (options.deleted === true || !v.deleted));
    if (found === undefined)
      throw new RegistryError(
        RegistryErrors.schemaNotFound,
        `${action}: the schema is not registered under it`,
      );
    return this.#describe(entry, found);
  }

  #describe(entry: SubjectEntry, v: VersionEntry): SubjectVersion {
    const schema = this.#state.schemas.get(v.id)!;
    return {
      subject: entry.name,
      version: v.version,
      id: v.id,
      schemaType: schema.type,
      schema: schema.schema,
      deleted: v.deleted,
    };
  }

  /** A subject with at least one version (live, or any with `deleted`). @throws RegistryError subject_not_found. */
  #subject(subject: string, action: string, deleted: boolean): SubjectEntry {
    const entry = this.#state.subjects.get(subject);
    if (entry === undefined || !entry.versions.some((v) => deleted || !v.deleted))
      throw new RegistryError(
        RegistryErrors.subjectNotFound,
        `${action}: subject ${quote(subject)} not found`,
      );
    return entry;
  }

  /** Subject names with a live version (any version with `deleted`), sorted; only those starting with `prefix` if given. */
  subjects(options: { deleted?: boolean; prefix?: string } = {}): string[] {
    this.#checkAvailable();
    return [...this.#state.subjects.values()]
      .filter((s) => s.versions.some((v) => options.deleted === true || !v.deleted))
      .map((s) => s.name)
      .filter((name) => options.prefix === undefined || name.startsWith(options.prefix))
      .sort();
  }

  /** Version numbers of a subject, ascending. @throws RegistryError subject_not_found, unavailable. */
  versions(subject: string, options: { deleted?: boolean } = {}): number[] {
    this.#checkAvailable();
    const action = `Cannot list the versions of subject ${quote(subject)}`;
    return this.#subject(subject, action, options.deleted === true)
      .versions.filter((v) => options.deleted === true || !v.deleted)
      .map((v) => v.version);
  }

  /**
   * One version of a subject: a number, or "latest" / −1 for the latest live one. Soft-deleted
   * versions only with `deleted`.
   * @throws RegistryError invalid_version, subject_not_found, version_not_found, unavailable.
   */
  version(
    subject: string,
    versionText: string,
    options: { deleted?: boolean } = {},
  ): SubjectVersion {
    this.#checkAvailable();
    const action = `Cannot get version ${quote(versionText)} of subject ${quote(subject)}`;
    const wanted = parseVersion(versionText, action);
    const entry = this.#subject(subject, action, options.deleted === true);
    const found = this.#findVersion(entry, wanted, options.deleted === true);
    if (found === undefined)
      throw new RegistryError(RegistryErrors.versionNotFound, `${action}: version not found`);
    return this.#describe(entry, found);
  }

  #findVersion(
    entry: SubjectEntry,
    wanted: number | "latest",
    deleted: boolean,
  ): VersionEntry | undefined {
    if (wanted === "latest") return entry.versions.filter((v) => !v.deleted).at(-1);
    return entry.versions.find((v) => v.version === wanted && (deleted || !v.deleted));
  }

  /**
   * The schema of an id (`GET /schemas/ids/{id}`), while some version (live or soft-deleted)
   * uses it: after every such version is deleted permanently, it is not found (the id is still
   * never given to another schema).
   * @throws RegistryError schema_not_found, unavailable.
   */
  schemaById(id: number): { schemaType: SchemaType; schema: string } {
    this.#checkAvailable();
    const entry = this.#state.schemas.get(id);
    if (entry === undefined || this.versionsOfId(id, { deleted: true }).length === 0)
      throw new RegistryError(RegistryErrors.schemaNotFound, `Cannot find schema id ${id}`);
    return { schemaType: entry.type, schema: entry.schema };
  }

  /** Every (subject, version) using schema `id` (soft-deleted ones with `deleted`), by subject then version. */
  versionsOfId(
    id: number,
    options: { deleted?: boolean } = {},
  ): { subject: string; version: number }[] {
    this.#checkAvailable();
    const out: { subject: string; version: number }[] = [];
    for (const s of [...this.#state.subjects.values()].sort((a, b) => (a.name < b.name ? -1 : 1)))
      for (const v of s.versions)
        if (v.id === id && (options.deleted === true || !v.deleted))
          out.push({ subject: s.name, version: v.version });
    return out;
  }

  // ---- deletion ----

  /**
   * Deletes a subject: soft (its live versions become soft-deleted) or, with `permanent`, for
   * good once it is soft-deleted (its versions and compatibility level go; numbering restarts).
   * @returns the versions deleted.
   * @throws RegistryError subject_not_found, subject_soft_deleted (soft, again),
   *   subject_not_soft_deleted (permanent first), store_failed, unavailable.
   */
  async deleteSubject(subject: string, options: { permanent?: boolean } = {}): Promise<number[]> {
    this.#checkAvailable();
    const action = `Cannot delete subject ${quote(subject)}`;
    return this.#change(async () => {
      const state = this.#state;
      const entry = state.subjects.get(subject);
      if (entry === undefined || entry.versions.length === 0)
        throw new RegistryError(RegistryErrors.subjectNotFound, `${action}: subject not found`);
      const live = entry.versions.filter((v) => !v.deleted);
      const subjects = new Map(state.subjects);
      let deleted: number[];
      let subjectCompatibility = state.subjectCompatibility;
      if (options.permanent === true) {
        if (live.length > 0)
          throw new RegistryError(
            RegistryErrors.subjectNotSoftDeleted,
            `${action}: it must be soft-deleted first (DELETE without permanent=true); live versions: ${live.map((v) => v.version).join(", ")}`,
          );
        subjects.delete(subject);
        deleted = entry.versions.map((v) => v.version);
        subjectCompatibility = withoutKey(state.subjectCompatibility, subject);
      } else {
        if (live.length === 0)
          throw new RegistryError(
            RegistryErrors.subjectSoftDeleted,
            `${action}: it is already soft-deleted; delete it with permanent=true to remove it for good`,
          );
        subjects.set(subject, {
          ...entry,
          versions: entry.versions.map((v) => (v.deleted ? v : { ...v, deleted: true })),
        });
        deleted = live.map((v) => v.version);
      }
      await this.#commit({ ...state, subjects, subjectCompatibility }, action);
      this.#logger.log("info", "registry.subject_deleted", {
        subject,
        versions: deleted,
        permanent: options.permanent === true,
      });
      return deleted;
    });
  }

  /**
   * Deletes one version: soft, or with `permanent` for good once soft-deleted ("latest" means
   * the latest live version). A subject left with no version is gone, with its level.
   * @returns the version number.
   * @throws RegistryError invalid_version, subject_not_found, version_not_found,
   *   version_soft_deleted, version_not_soft_deleted, store_failed, unavailable.
   */
  async deleteVersion(
    subject: string,
    versionText: string,
    options: { permanent?: boolean } = {},
  ): Promise<number> {
    this.#checkAvailable();
    const action = `Cannot delete version ${quote(versionText)} of subject ${quote(subject)}`;
    const wanted = parseVersion(versionText, action);
    return this.#change(async () => {
      const state = this.#state;
      const entry = state.subjects.get(subject);
      if (entry === undefined || entry.versions.length === 0)
        throw new RegistryError(RegistryErrors.subjectNotFound, `${action}: subject not found`);
      const target = this.#findVersion(entry, wanted, true);
      if (target === undefined)
        throw new RegistryError(RegistryErrors.versionNotFound, `${action}: version not found`);
      const subjects = new Map(state.subjects);
      let subjectCompatibility = state.subjectCompatibility;
      if (options.permanent === true) {
        if (!target.deleted)
          throw new RegistryError(
            RegistryErrors.versionNotSoftDeleted,
            `${action}: it must be soft-deleted first (DELETE without permanent=true)`,
          );
        const versions = entry.versions.filter((v) => v !== target);
        if (versions.length === 0) {
          subjects.delete(subject);
          subjectCompatibility = withoutKey(state.subjectCompatibility, subject);
        } else subjects.set(subject, { ...entry, versions });
      } else {
        if (target.deleted)
          throw new RegistryError(
            RegistryErrors.versionSoftDeleted,
            `${action}: it is already soft-deleted; delete it with permanent=true to remove it for good`,
          );
        subjects.set(subject, {
          ...entry,
          versions: entry.versions.map((v) => (v === target ? { ...v, deleted: true } : v)),
        });
      }
      await this.#commit({ ...state, subjects, subjectCompatibility }, action);
      this.#logger.log("info", "registry.version_deleted", {
        subject,
        version: target.version,
        permanent: options.permanent === true,
      });
      return target.version;
    });
  }

  // ---- compatibility levels ----

  /** The level that applies to `subject`: its own, else the global one. */
  #level(subject: string): CompatibilityLevel {
    return this.#state.subjectCompatibility.get(subject) ?? this.#state.compatibility;
  }

  /**
   * The global level (no subject), or a subject's own level; with `defaultToGlobal`, the global
   * level when the subject has none.
   * @throws RegistryError subject_config_not_found, unavailable.
   */
  compatibility(subject?: string, options: { defaultToGlobal?: boolean } = {}): CompatibilityLevel {
    this.#checkAvailable();
    if (subject === undefined) return this.#state.compatibility;
    const own = this.#state.subjectCompatibility.get(subject);
    if (own !== undefined) return own;
    if (options.defaultToGlobal === true) return this.#state.compatibility;
    throw new RegistryError(
      RegistryErrors.subjectConfigNotFound,
      `Subject ${quote(subject)} does not have subject-level compatibility configured`,
    );
  }

  /**
   * Sets the global level, or a subject's (the subject need not exist yet).
   * @throws RegistryError store_failed, unavailable (subject names are checked: invalid_request).
   */
  async setCompatibility(
    subject: string | undefined,
    level: CompatibilityLevel,
  ): Promise<CompatibilityLevel> {
    this.#checkAvailable();
    const action =
      subject === undefined
        ? "Cannot set the global compatibility level"
        : `Cannot set the compatibility level of subject ${quote(subject)}`;
    if (subject !== undefined) checkSubject(subject, action);
    return this.#change(async () => {
      const state = this.#state;
      if (subject === undefined) await this.#commit({ ...state, compatibility: level }, action);
      else {
        const subjectCompatibility = new Map(state.subjectCompatibility);
        subjectCompatibility.set(subject, level);
        await this.#commit({ ...state, subjectCompatibility }, action);
      }
      this.#logger.log("info", "registry.compatibility_set", { subject: subject ?? null, level });
      return level;
    });
  }

  /**
   * Removes a subject's own level (it falls back to the global one), or resets the global level
   * to the default (BACKWARD).
   * @returns the level that was set before.
   * @throws RegistryError subject_config_not_found, store_failed, unavailable.
   */
  async deleteCompatibility(subject?: string): Promise<CompatibilityLevel> {
    this.#checkAvailable();
    const action =
      subject === undefined
        ? "Cannot reset the global compatibility level"
        : `Cannot delete the compatibility level of subject ${quote(subject)}`;
    return this.#change(async () => {
      const state = this.#state;
      if (subject === undefined) {
        await this.#commit({ ...state, compatibility: compatibilityDefault }, action);
        return state.compatibility;
      }
      const previous = state.subjectCompatibility.get(subject);
      if (previous === undefined)
        throw new RegistryError(
          RegistryErrors.subjectConfigNotFound,
          `${action}: it has no subject-level compatibility configured`,
        );
      const subjectCompatibility = new Map(state.subjectCompatibility);
      subjectCompatibility.delete(subject);
      await this.#commit({ ...state, subjectCompatibility }, action);
      return previous;
    });
  }

  /**
   * Tests `input` against a subject (`POST /compatibility/subjects/{subject}/versions[/{v}]`).
   * Without a version, or with "latest", the answer is exactly what registering it would decide
   * (the subject's level, transitive levels against every live version; a schema that is already
   * a live version is compatible; no subject: compatible without a version, 40401 with "latest").
   * With a version number: that one version, by the direction of the subject's level.
   * @throws RegistryError invalid_schema, invalid_version, subject_not_found, version_not_found, unavailable.
   */
  async testCompatibility(
    subject: string,
    versionText: string | undefined,
    input: SchemaInput,
  ): Promise<{ compatible: boolean; reasons: string[]; level: CompatibilityLevel }> {
    this.#checkAvailable();
    await loadSchemaLibraries();
    const action = `Cannot test compatibility with subject ${quote(subject)}`;
    const wanted = versionText === undefined ? undefined : parseVersion(versionText, action);
    const candidate = parseInput(input, action);
    const level = this.#level(subject);
    const entry = this.#state.subjects.get(subject);
    const live = entry?.versions.filter((v) => !v.deleted) ?? [];
    if (typeof wanted === "number" || wanted === "latest") {
      if (live.length === 0 && (entry === undefined || wanted === "latest"))
        throw new RegistryError(RegistryErrors.subjectNotFound, `${action}: subject not found`);
    }
    if (typeof wanted === "number") {
      const target = entry === undefined ? undefined : this.#findVersion(entry, wanted, false);
      if (target === undefined)
        throw new RegistryError(
          RegistryErrors.versionNotFound,
          `${action}: version ${wanted} not found`,
        );
      const one = [{ version: target.version, schema: this.#compiledSchema(target.id).parsed }];
      const reasons = incompatibilities(
        candidate,
        one,
        level === "NONE" ? "NONE" : nonTransitive(level),
      );
      return { compatible: reasons.length === 0, reasons, level };
    }
    const knownId = this.#byContent.get(contentKey(candidate.type, candidate.canonical));
    if (knownId !== undefined && live.some((v) => v.id === knownId))
      return { compatible: true, reasons: [], level };
    const reasons = incompatibilities(candidate, this.#compareWith(live, level), level);
    return { compatible: reasons.length === 0, reasons, level };
  }

  // ---- produce-time checks ----

  /**
   * Checks every record of a produce against `rules` (docs/registry.md "Produce-time
   * validation"), in order, and returns the first refusal, or null when every record passes. A
   * record without a key passes the key rule and an empty value (a tombstone) passes the value
   * rule: there is nothing to decode. Synchronous: validators are compiled once per schema id
   * and cached.
   * @throws RegistryError unavailable (the registry cannot be read: produces fail closed).
   */
  checkBatch(batch: EntryBatch, rules: RecordRules): RecordRejection | null {
    this.#checkAvailable();
    const cursor = new EntryCursor(batch);
    const view = new DataView(batch.bytes.buffer, batch.bytes.byteOffset, batch.bytes.byteLength);
    while (cursor.next()) {
      if (rules.key !== undefined && cursor.keyLen >= 0) {
        const key = batch.bytes.subarray(cursor.keyStart, cursor.keyStart + cursor.keyLen);
        const refusal = this.#checkPart(key, rules.key, cursor.index, "key");
        if (refusal !== null) return refusal;
      }
      if (rules.value !== undefined) {
        const valueStart = cursor.keyStart + Math.max(cursor.keyLen, 0) + 4;
        const valueLen = view.getUint32(valueStart - 4);
        if (valueLen === 0) continue;
        const value = batch.bytes.subarray(valueStart, valueStart + valueLen);
        const refusal = this.#checkPart(value, rules.value, cursor.index, "value");
        if (refusal !== null) return refusal;
      }
    }
    return null;
  }

  #checkPart(
    bytes: Uint8Array,
    rule: PartRule,
    recordIndex: number,
    part: "key" | "value",
  ): RecordRejection | null {
    const subject = rule.subject;
    const index = this.#subjectIndex(subject);
    const refuse = (
      reason: string,
      at: { schemaId?: number | null; version?: number | null; path?: string | null } = {},
    ): RecordRejection => ({
      recordIndex,
      part,
      subject,
      schemaId: at.schemaId ?? null,
      version: at.version ?? null,
      path: at.path ?? null,
      reason,
    });
    if (rule.format === "json") {
      const latest = index.latest;
      if (latest === null) return refuse(noLiveVersion(subject));
      const compiled = this.#compiledSchema(latest.id);
      const at = { schemaId: latest.id, version: latest.version };
      if (compiled.parsed.type !== "JSON")
        return refuse(
          `schema_format "json" needs a JSON schema, but the latest version of subject ${quote(subject)} is ${compiled.parsed.type}`,
          at,
        );
      const failure = compiled.check(bytes);
      return failure === null ? null : refuse(failure.reason, { ...at, path: failure.path });
    }
    if (bytes.length < schemaWireHeaderBytes)
      return refuse(
        `it is ${bytes.length} bytes, shorter than the ${schemaWireHeaderBytes}-byte wire header (magic byte 0, then the schema id as 4 bytes)`,
      );
    if (bytes[0] !== 0)
      return refuse(
        `it starts with magic byte ${bytes[0]}, not 0: it is not in the Confluent wire format`,
      );
    const id = ((bytes[1] << 24) >>> 0) + (bytes[2] << 16) + (bytes[3] << 8) + bytes[4];
    const version = index.byId.get(id);
    if (version === undefined) {
      const deleted = index.deletedById.get(id);
      if (deleted !== undefined)
        return refuse(
          `schema id ${id} is version ${deleted} of subject ${quote(subject)}, which is soft-deleted`,
          {
            schemaId: id,
            version: deleted,
          },
        );
      // Whatever the id, a subject without a live version takes none: say what fixes it.
      if (index.latest === null) return refuse(noLiveVersion(subject), { schemaId: id });
      if (!this.#state.schemas.has(id))
        return refuse(`schema id ${id} does not exist`, { schemaId: id });
      return refuse(`schema id ${id} is not a version of subject ${quote(subject)}`, {
        schemaId: id,
      });
    }
    const failure = this.#compiledSchema(id).check(bytes.subarray(schemaWireHeaderBytes));
    return failure === null
      ? null
      : refuse(failure.reason, { schemaId: id, version, path: failure.path });
  }

  #subjectIndex(subject: string): SubjectIndex {
    let index = this.#subjectIndexes.get(subject);
    if (index === undefined) {
      index = { byId: new Map(), deletedById: new Map(), latest: null };
      for (const v of this.#state.subjects.get(subject)?.versions ?? []) {
        if (v.deleted) index.deletedById.set(v.id, v.version);
        else {
          index.byId.set(v.id, v.version);
          index.latest = v;
        }
      }
      this.#subjectIndexes.set(subject, index);
    }
    return index;
  }

  /** Refuses every later call (unavailable); waits for a change in flight to finish. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#writes.run(async () => {});
  }
}

function withoutKey<K, V>(map: ReadonlyMap<K, V>, key: K): ReadonlyMap<K, V> {
  const copy = new Map(map);
  copy.delete(key);
  return copy;
}

function contentKey(type: SchemaType, canonical: string): string {
  return `${type}\n${canonical}`;
}

function nonTransitive(level: CompatibilityLevel): CompatibilityLevel {
  return level.replace("_TRANSITIVE", "") as CompatibilityLevel;
}

/** Parses a request's schema, type and references. @throws RegistryError invalid_schema. */
function parseInput(input: SchemaInput, action: string): ParsedSchema {
  if (typeof input.schema !== "string")
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: "schema" must be a string holding the schema's JSON text`,
    );
  if (input.references !== undefined && input.references !== null) {
    if (!Array.isArray(input.references))
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `${action}: "references" must be an array`,
      );
    if (input.references.length > 0)
      throw new RegistryError(
        RegistryErrors.invalidSchema,
        `${action}: schema references ("references") are not supported by this registry; define the referenced types inside "schema" instead`,
      );
  }
  return parseSchema(parseSchemaType(input.schemaType, action), input.schema, action);
}

/** True for a valid subject name: 1 to `subjectCharsMax` characters, none a control character (U+0000–U+001F, U+007F). */
export function isSubjectName(subject: string): boolean {
  if (subject.length === 0 || subject.length > subjectCharsMax) return false;
  for (let i = 0; i < subject.length; i++) {
    const code = subject.charCodeAt(i);
    if (code < 0x20 || code === 0x7f) return false;
  }
  return true;
}

/** Checks a subject name ({@link isSubjectName}). @throws RegistryError invalid_subject. */
export function checkSubject(subject: string, action: string): void {
  if (!isSubjectName(subject))
    throw new RegistryError(
      RegistryErrors.invalidSubject,
      `${action}: a subject name must be 1 to ${subjectCharsMax} characters without control characters`,
    );
}

/** Largest version number (as Confluent: a positive 32-bit integer). */
const versionMax = 0x7fff_ffff;

/**
 * A version from a path: a number 1 … 2^31 − 1, or "latest" / "-1".
 * @throws RegistryError invalid_version (42202).
 */
export function parseVersion(text: string, action: string): number | "latest" {
  if (text === "latest" || text === "-1") return "latest";
  if (/^[1-9]\d{0,9}$/.test(text) && Number(text) <= versionMax) return Number(text);
  throw new RegistryError(
    RegistryErrors.invalidVersion,
    `${action}: version ${quote(text)} is not valid: it must be an integer from 1 to ${versionMax}, "latest" or -1`,
  );
}

/**
 * The reason a record is refused when its topic's subject has no live version (never registered,
 * or every version soft-deleted): the topic may name a subject before it exists (docs/registry.md
 * "Produce-time validation"), so the produce says how to fill it.
 */
function noLiveVersion(subject: string): string {
  return `subject ${quote(subject)} has no live version: register one (POST /registry/subjects/${encodeURIComponent(subject)}/versions) before producing`;
}
