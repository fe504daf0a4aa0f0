/**
 * The API keys of a data directory: `<dataDir>/api_keys.json`, key hashes and metadata, never a
 * secret (`docs/security.md`). Written only through the atomic metadata writer
 * (`storage/metadata.ts`: temp file, fsync, rename, fsync directory; mode 0600), so a crash at any
 * point leaves the old file or the new one.
 *
 * ```json
 * { "version": 1,
 *   "keys": [ { "id": "3f9c0a7de1b24c55", "name": "ingest", "role": "producer",
 *               "topics": ["orders.*"], "groups": [],
 *               "hash": "sha256:<64 hex digits of SHA-256 over the whole key text>",
 *               "created_ms": 1700000000000, "last_used_ms": 1700000060000 } ] }
 * ```
 *
 * Authentication is on whenever the file exists, even with no keys in it (then only
 * `GET /healthz` is served): revoking the last key never turns authentication off. A file that
 * cannot be read or parsed, or holds an entry that breaks the rules below, refuses the start
 * naming the file (docs/decisions.md §9: never fall back to no authentication); on a reload (SIGHUP) the
 * keys already loaded stay in force instead.
 *
 * Concurrency and failures: every change (create, revoke, a `last_used_ms` update) is made under
 * one mutex, as a whole new file written from the keys in memory. A created key is usable once
 * its file is durable (before that `create` has not resolved). A revoked key is refused from the
 * moment `revoke` is called, before the file is written; if the write fails, `revoke` rejects,
 * the key stays refused in this process, and the next write of the file (or a second `revoke` of
 * the same name) leaves it out. `last_used_ms` is kept to the minute: it is written at most once
 * per {@link apiKeyLastUsedIntervalMs} per key, in the background; a failed write is logged.
 *
 * Hand edits (docs/security.md "Keys"): the store remembers the file's bytes as it last read or
 * wrote them, and reads the file again before each write. If they differ, someone edited it and
 * has not sent SIGHUP yet: a `last_used_ms` write is skipped (`auth.keys_file_changed`), so it
 * never writes back a key removed by hand nor drops one added by hand; a create or revoke loads the
 * edited file first, as SIGHUP would (`auth.keys_reloaded`, `reason` "changed_on_disk"), then
 * applies its change, or is refused (unavailable) if the edited file cannot be used. An edit
 * landing between that read and the rename can still be lost: edit by writing a new file and
 * renaming it over the old one, then send SIGHUP.
 *
 * In cluster mode the keys are kept in etcd instead, behind a {@link KeyStoreBackend}
 * (`cluster/cluster-keys.ts`): create and revoke go to the backend, which hands every change it
 * sees (other brokers' too) to {@link KeyStore.adopt}; `last_used_ms` stays in memory.
 */
import { BrokerError, Errors } from "../broker/errors.ts";
import { storageFailure } from "../broker/storage-failure.ts";
import { FsError, isFsError, readWholeFile, type FileSystem } from "../fs/types.ts";
import type { Clock } from "../lib/clock.ts";
import {
  apiKeyLastUsedIntervalMs,
  apiKeyNameCharsMax,
  apiKeysMax,
  metadataFileBytesMax,
} from "../lib/limits.ts";
import type { Logger } from "../lib/logger.ts";
import { Mutex } from "../lib/mutex.ts";
import { clip, quote } from "../lib/quote.ts";
import { utf8 } from "../lib/bytes.ts";
import { readJsonFile, writeFileAtomic } from "../storage/metadata.ts";
import { constantTimeEqual, fromHex, type KeyCrypto } from "./crypto.ts";
import { generateApiKey, keyHash, parseApiKeyId } from "./key-format.ts";
import { validatePatterns, type NamePattern } from "./patterns.ts";
import { isRole, type KeyPrincipal, type Role } from "./principal.ts";

/** File name of the key store inside the data directory. */
export const apiKeysFileName = "api_keys.json";

/** Version of the file format this code reads and writes. */
export const apiKeysFileVersion = 1;

/** A key as listed: everything but its hash. */
export interface ApiKeyInfo {
  /** The key's id part (not secret). */
  id: string;
  /** Unique name, `[A-Za-z0-9._-]`, 1–{@link apiKeyNameCharsMax} characters. */
  name: string;
  role: Role;
  /** Topic patterns (producer, consumer). */
  topics: NamePattern[];
  /** Group patterns (consumer). */
  groups: NamePattern[];
  /** When the key was made, ms since the epoch. */
  created_ms: number;
  /** Last successful authentication, to the minute; null if never used. */
  last_used_ms: number | null;
}

/** What a new key may do: `keys create`'s arguments. */
export interface ApiKeySpec {
  name: unknown;
  role: unknown;
  /** Topic patterns: required (non-empty) for producer and consumer, refused for admin. */
  topics?: unknown;
  /** Group patterns: optional for consumer, refused for admin and producer. */
  groups?: unknown;
}

/** An `api_keys.json` that cannot be used: the start is refused (or, on reload, the old keys kept). */
export class KeyStoreError extends Error {
  override name = "KeyStoreError";
  /**
   * @param path the file.
   * @param reason what is wrong, without any of the file's values.
   */
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super(`Cannot use the API key file ${path}: ${reason}`);
  }
}

/** Most revoked key ids a {@link KeyStore} remembers for `auth.failed`'s reason. */
const goneIdsMax = 10_000;

/**
 * What changed in a {@link KeyStore}, for {@link KeyStore.onChange} listeners: sent after every
 * create (authentication may have just turned on), revoke and reload.
 */
export interface KeyStoreChange {
  /** Principals no longer valid (revoked, removed from the file, or changed by a reload). */
  invalidated: KeyPrincipal[];
}

/** One key as stored (in `api_keys.json`, or in etcd in cluster mode): its metadata and its hash, never the key. */
export interface StoredKey {
  info: ApiKeyInfo;
  /** `sha256:<64 hex digits>` of the whole key text. */
  hash: string;
}

/**
 * Where a {@link KeyStore}'s keys are kept when not in `api_keys.json`: in cluster mode, etcd
 * (`cluster/cluster-keys.ts`, docs/cluster.md "Schema registry and API keys in etcd"). The
 * backend tells the store of every change it learns of through {@link KeyStore.adopt}.
 */
export interface KeyStoreBackend {
  /** Where the keys are, for messages. */
  readonly where: string;
  /**
   * Stores a new key durably, unless a key of that name exists (or existed and was revoked
   * under that id).
   * @throws BrokerError unavailable when it cannot be stored (the key is then not usable).
   */
  create(key: StoredKey): Promise<"created" | "exists">;
  /**
   * Removes the key named `name` for good; resolves with what was stored, or null if there was
   * no such key.
   * @throws BrokerError unavailable when it cannot be removed.
   */
  revoke(name: string): Promise<StoredKey | null>;
}

/** Options of {@link KeyStore.open}. */
export interface KeyStoreOptions {
  fs: FileSystem;
  /** Path of `api_keys.json` (normally `<dataDir>/api_keys.json`). */
  path: string;
  crypto: KeyCrypto;
  clock: Clock;
  logger: Logger;
}

interface Entry {
  info: ApiKeyInfo;
  /** `sha256:<hex>` as stored. */
  hash: string;
  /** The digest's bytes, for the comparison. */
  digest: Uint8Array;
  principal: KeyPrincipal;
  /** `last_used_ms` as last written to the file (or read from it). */
  lastUsedWrittenMs: number | null;
}

const namePattern = /^[A-Za-z0-9._-]+$/;
const hashPattern = /^sha256:[0-9a-f]{64}$/;
const idPattern = /^[0-9a-f]{16}$/;
const entryFields = new Set([
  "id",
  "name",
  "role",
  "topics",
  "groups",
  "hash",
  "created_ms",
  "last_used_ms",
]);

/**
 * Checks a key name.
 * @throws BrokerError invalid_request naming what is wrong.
 */
export function validateKeyName(name: unknown): string {
  if (typeof name !== "string")
    throw new BrokerError(Errors.invalidRequest, "Cannot accept key name: it must be a string");
  if (name.length === 0 || name.length > apiKeyNameCharsMax || !namePattern.test(name))
    throw new BrokerError(
      Errors.invalidRequest,
      `Cannot accept key name ${quote(name)}: a key name is 1–${apiKeyNameCharsMax} characters of [A-Za-z0-9._-]`,
    );
  return name;
}

/**
 * Checks what a new key may do (role and patterns; module comment of `auth/roles.ts`).
 * @throws BrokerError invalid_request naming the field.
 */
export function validateKeySpec(
  wanted: ApiKeySpec,
): Omit<ApiKeyInfo, "id" | "created_ms" | "last_used_ms"> {
  const name = validateKeyName(wanted.name);
  const action = `Cannot create key ${JSON.stringify(name)}`;
  if (!isRole(wanted.role))
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: role must be admin, producer or consumer`,
      {
        field: "role",
      },
    );
  const role = wanted.role;
  const topics = wanted.topics === undefined ? [] : validatePatterns(wanted.topics, "topic");
  const groups = wanted.groups === undefined ? [] : validatePatterns(wanted.groups, "group");
  if (role === "admin" && (topics.length > 0 || groups.length > 0))
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: an admin key takes no topic or group patterns (admin may use every topic and group)`,
      { field: topics.length > 0 ? "topics" : "groups" },
    );
  if (role !== "admin" && topics.length === 0)
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: a ${role} key needs at least one topic pattern (an exact name, a prefix ending in "*", or "*" for every topic)`,
      { field: "topics" },
    );
  if (role === "producer" && groups.length > 0)
    throw new BrokerError(
      Errors.invalidRequest,
      `${action}: a producer key takes no group patterns`,
      {
        field: "groups",
      },
    );
  return { name, role, topics, groups };
}

/** See the module comment. */
export class KeyStore {
  readonly #fs: FileSystem | null;
  readonly #backend: KeyStoreBackend | null;
  readonly #path: string;
  readonly #crypto: KeyCrypto;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #mutex = new Mutex();
  /** Usable keys by id. */
  #byId = new Map<string, Entry>();
  /** Usable keys by name. */
  #byName = new Map<string, Entry>();
  /** Keys revoked in memory whose removal from the file has not been written yet, by name. */
  #revoking = new Map<string, Entry>();
  #enabled: boolean;
  #lastUsedWriteScheduled = false;
  #lastUsedWrite: Promise<void> = Promise.resolve();
  #listeners = new Set<(change: KeyStoreChange) => void>();
  /** Ids of keys revoked or removed since start, oldest first ({@link KeyStore.wasRevoked}). */
  #goneIds = new Set<string>();
  #closed = false;
  /** The file's bytes as this store last read or wrote them (null: there was no file). */
  #fileBytes: Uint8Array | null = null;

  private constructor(
    options: Omit<KeyStoreOptions, "fs" | "path"> &
      ({ fs: FileSystem; path: string } | { backend: KeyStoreBackend }),
    entries: Entry[] | null,
  ) {
    if ("backend" in options) {
      this.#fs = null;
      this.#backend = options.backend;
      this.#path = options.backend.where;
    } else {
      this.#fs = options.fs;
      this.#backend = null;
      this.#path = options.path;
    }
    this.#crypto = options.crypto;
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#enabled = entries !== null;
    for (const entry of entries ?? []) this.#add(entry);
  }

  /**
   * Reads the key file. A missing file means authentication is off (until a key is created).
   * @throws KeyStoreError naming the file if it exists but cannot be read or parsed, or breaks a rule.
   */
  static async open(options: KeyStoreOptions): Promise<KeyStore> {
    const read = await readKeyFile(options.fs, options.path);
    const store = new KeyStore(options, read.entries);
    store.#fileBytes = read.bytes;
    return store;
  }

  /**
   * A store whose keys are kept by `backend` (cluster mode: etcd) rather than in a file,
   * starting with `keys`; `enabled`: authentication is on (the cluster has had a key).
   */
  static withBackend(
    options: Omit<KeyStoreOptions, "fs" | "path"> & { backend: KeyStoreBackend },
    keys: readonly StoredKey[],
    enabled: boolean,
  ): KeyStore {
    return new KeyStore(
      options,
      enabled || keys.length > 0 ? keys.map((k) => makeEntry(copyInfo(k.info), k.hash)) : null,
    );
  }

  /**
   * Takes the keys as the backend now holds them (another broker created or revoked one): keys
   * gone or changed are invalidated, exactly as by a reload (their open connections and streams
   * are told through {@link onChange}); unchanged keys keep their principals.
   */
  adopt(keys: readonly StoredKey[], enabled: boolean): void {
    if (this.#backend === null) throw new Error("adopt() is only for a key store with a backend");
    if (this.#closed) return;
    this.#replace(
      keys.map((k) => makeEntry(copyInfo(k.info), k.hash)),
      this.#enabled || enabled || keys.length > 0,
    );
  }

  /** The file's path (or where the backend keeps the keys). */
  get path(): string {
    return this.#path;
  }

  /** True when a backend keeps the keys (cluster mode: etcd), not `api_keys.json`. */
  get clustered(): boolean {
    return this.#backend !== null;
  }

  /** True while authentication is on: the file exists (it may hold no key). */
  get enabled(): boolean {
    return this.#enabled;
  }

  /** Number of usable keys. */
  get size(): number {
    return this.#byId.size;
  }

  /**
   * Checks a key's text: its form, its id, then its hash in constant time. Returns the key's
   * principal, or null for a malformed, unknown, revoked or wrong key. Never logs; the caller
   * logs failures with the id part only ({@link parseApiKeyId}).
   */
  verify(text: string): KeyPrincipal | null {
    const id = parseApiKeyId(text);
    if (id === null) return null;
    const entry = this.#byId.get(id);
    // The hash is computed even for an unknown id, so an unknown id costs the same as a wrong secret.
    const digest = this.#crypto.sha256(utf8(text));
    if (entry === undefined) return null;
    return constantTimeEqual(digest, entry.digest) ? entry.principal : null;
  }

  /** The current principal of key `id`, or undefined if there is none (never made, revoked, changed). */
  principal(id: string): KeyPrincipal | undefined {
    return this.#byId.get(id)?.principal;
  }

  /** True if `principal` is still the current principal of its key. */
  isCurrent(principal: KeyPrincipal): boolean {
    return this.#byId.get(principal.id)?.principal === principal;
  }

  /** Every usable key with its hash (never its text): what cluster mode imports into etcd. */
  stored(): StoredKey[] {
    return [...this.#byId.values()].map((e) => ({ info: copyInfo(e.info), hash: e.hash }));
  }

  /** Every usable key, by name. */
  list(): ApiKeyInfo[] {
    return [...this.#byId.values()]
      .map((e) => copyInfo(e.info))
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Calls `listener` after every create, revoke and reload ({@link KeyStoreChange}). Returns an unsubscribe function. */
  onChange(listener: (change: KeyStoreChange) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /**
   * Makes a key, writes the file durably, and only then returns the key's text (the one time it
   * is shown) with its metadata. Turns authentication on if it was off.
   * @param options.anonymous the caller has no key (the broker had none when it was let in): then
   *   only the first key may be made, and only an admin one — a first producer or consumer key
   *   would end anonymous access with no admin key left to make others (docs/http-api.md "API keys: `POST /v1/admin/keys`, `GET /v1/admin/keys`, `DELETE /v1/admin/keys/{name}`").
   * @throws BrokerError invalid_request (a bad name, role or pattern; a first key over the API
   *   that is not admin), unauthenticated (anonymous, and a key exists already), key_exists,
   *   invalid_request past {@link apiKeysMax},
   *   storage_error / internal when the file cannot be written (the key is then not usable).
   */
  async create(
    wanted: ApiKeySpec,
    options: { anonymous?: boolean } = {},
  ): Promise<{ key: string; info: ApiKeyInfo }> {
    const checked = validateKeySpec(wanted);
    return this.#mutex.run(async () => {
      this.#checkOpen();
      const action = `Cannot create key ${JSON.stringify(checked.name)}`;
      await this.#loadIfChanged(action);
      if (options.anonymous === true && this.#byId.size > 0)
        throw new BrokerError(
          Errors.unauthenticated,
          `${action}: another request made the first key meanwhile; give an admin key`,
        );
      if (options.anonymous === true && checked.role !== "admin")
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: the first key must have role "admin", not ${JSON.stringify(checked.role)}: once a key exists every request needs one, and only an admin key can make more (create an admin key first, then this one with it)`,
          { field: "role" },
        );
      if (this.#byName.has(checked.name) || this.#revoking.has(checked.name))
        throw new BrokerError(Errors.keyExists, `${action}: a key with that name exists`, {
          name: checked.name,
        });
      if (this.#byId.size >= apiKeysMax)
        throw new BrokerError(
          Errors.invalidRequest,
          `${action}: the broker already holds ${apiKeysMax} keys`,
        );
      let made = generateApiKey(this.#crypto);
      while (this.#byId.has(made.id)) made = generateApiKey(this.#crypto);
      const hash = keyHash(this.#crypto, made.text);
      const info: ApiKeyInfo = {
        id: made.id,
        ...checked,
        created_ms: this.#clock.nowMs(),
        last_used_ms: null,
      };
      const entry = makeEntry(info, hash);
      if (this.#backend !== null) {
        const stored = await this.#backend.create({ info: copyInfo(info), hash });
        if (stored === "exists")
          throw new BrokerError(Errors.keyExists, `${action}: a key with that name exists`, {
            name: checked.name,
          });
        // The backend may have handed it over already (adopt): keep that principal.
        if (!this.#byId.has(entry.info.id)) this.#add(entry);
      } else {
        await this.#write([...this.#byId.values(), entry], action);
        this.#add(entry);
      }
      this.#enabled = true;
      // No principal is invalidated, but anonymous access ends if this was the first key.
      this.#emit({ invalidated: [] });
      return { key: made.text, info: copyInfo(info) };
    });
  }

  /**
   * Revokes the key named `name`: refused from this call on (open connections and streams of
   * it are told through {@link onChange}), then removed from the file durably.
   * @throws BrokerError key_not_found; storage_error / internal when the file cannot be written
   *   (the key stays refused in this process; call again to retry the write).
   */
  revoke(name: string): Promise<ApiKeyInfo> {
    const action = `Cannot revoke key ${quote(name)}`;
    const entry = this.#byName.get(name);
    if (entry !== undefined) {
      this.#remove(entry);
      this.#revoking.set(name, entry);
      this.#emit({ invalidated: [entry.principal] });
    }
    return this.#mutex.run(async () => {
      this.#checkOpen();
      const revoking = this.#revoking.get(name);
      if (this.#backend !== null) {
        // The backend is asked even for a name this broker does not know yet (made elsewhere).
        const removed = await this.#backend.revoke(name);
        this.#revoking.delete(name);
        const info = revoking?.info ?? removed?.info;
        if (info === undefined)
          throw new BrokerError(Errors.keyNotFound, `${action}: no key has that name`, {
            name: clip(name),
          });
        const known = this.#byName.get(name);
        if (known !== undefined) {
          this.#remove(known);
          this.#emit({ invalidated: [known.principal] });
        }
        return copyInfo(info);
      }
      if (revoking === undefined)
        throw new BrokerError(Errors.keyNotFound, `${action}: no key has that name`, {
          name: clip(name),
        });
      await this.#loadIfChanged(action);
      await this.#write([...this.#byId.values()], action);
      this.#revoking.delete(name);
      return copyInfo(revoking.info);
    });
  }

  /**
   * Notes that `principal` authenticated now. Its `last_used_ms` is written to the file, in the
   * background, if the one there is {@link apiKeyLastUsedIntervalMs} old or older.
   */
  noteUse(principal: KeyPrincipal): void {
    const entry = this.#byId.get(principal.id);
    if (entry === undefined || entry.principal !== principal || this.#closed) return;
    const now = this.#clock.nowMs();
    const written = entry.lastUsedWrittenMs;
    if (written !== null && now - written < apiKeyLastUsedIntervalMs) return;
    entry.info.last_used_ms = now;
    // Marked written now, so one write is started per interval however many requests come.
    entry.lastUsedWrittenMs = now;
    // With a backend (cluster mode) the time is kept by this broker only (docs/cluster.md).
    if (this.#backend !== null || this.#lastUsedWriteScheduled) return;
    this.#lastUsedWriteScheduled = true;
    this.#lastUsedWrite = this.#mutex.run(async () => {
      this.#lastUsedWriteScheduled = false;
      if (this.#closed) return;
      try {
        if (await this.#changedOnDisk()) {
          this.#logger.log("warn", "auth.keys_file_changed", {
            file: this.#path,
            action:
              "the key file was changed since the broker loaded it: last-used times are not written until it is loaded (send SIGHUP), so the edit is kept",
          });
          return;
        }
        await this.#write([...this.#byId.values()], "Cannot record when API keys were last used");
      } catch (err) {
        this.#logger.log("warn", "auth.last_used_write_failed", {
          file: this.#path,
          error: err instanceof Error ? err.message : String(err),
        });
      }
    });
  }

  /**
   * Reads the file again (SIGHUP). Keys that are gone or changed are invalidated (as if
   * revoked); unchanged keys keep their principals, so their connections stay open.
   * @throws KeyStoreError if the file cannot be used (missing while authentication is on,
   *   unreadable, unparseable, or breaking a rule): the keys in memory stay in force.
   */
  reload(): Promise<{ keys: number; invalidated: number }> {
    return this.#mutex.run(async () => {
      this.#checkOpen();
      // With a backend, the keys follow it (adopt): there is no file to read again.
      if (this.#fs === null) return { keys: this.#byId.size, invalidated: 0 };
      const { entries, bytes } = await readKeyFile(this.#fs, this.#path);
      if (entries === null) {
        if (this.#enabled)
          throw new KeyStoreError(
            this.#path,
            `the file is missing; the ${this.#byId.size} keys loaded stay in force (authentication is never turned off while the broker runs)`,
          );
        return { keys: 0, invalidated: 0 };
      }
      const invalidated = this.#replace(entries, true);
      this.#fileBytes = bytes;
      return { keys: this.#byId.size, invalidated };
    });
  }

  /**
   * True if the file's bytes differ from those this store last read or wrote (an edit not yet
   * loaded). A file that cannot be read counts as changed.
   */
  async #changedOnDisk(): Promise<boolean> {
    let now: Uint8Array | null;
    try {
      now = await readWholeFile(this.#fs!, this.#path, metadataFileBytesMax);
    } catch (err) {
      if (!isFsError(err, "ENOENT")) return true;
      now = null;
    }
    const had = this.#fileBytes;
    if (now === null || had === null) return now !== had;
    if (now.length !== had.length) return true;
    for (let i = 0; i < now.length; i++) if (now[i] !== had[i]) return true;
    return false;
  }

  /**
   * Before a create or revoke writes the file (under the mutex): loads a hand edit not yet loaded,
   * as SIGHUP would, so the write keeps it.
   * @throws BrokerError unavailable (naming `action`) if the edited file cannot be used.
   */
  async #loadIfChanged(action: string): Promise<void> {
    // With a backend (cluster mode) there is no file: changes come through `adopt`.
    if (this.#fs === null || !(await this.#changedOnDisk())) return;
    let read: { entries: Entry[] | null; bytes: Uint8Array | null };
    try {
      read = await readKeyFile(this.#fs!, this.#path);
      if (read.entries === null && this.#enabled)
        throw new KeyStoreError(this.#path, "the file was removed");
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      throw new BrokerError(
        Errors.unavailable,
        `${action}: the key file was changed by hand since the broker loaded it and cannot be used (${why}); fix it and send SIGHUP, then try again`,
      );
    }
    const invalidated = this.#replace(read.entries ?? [], read.entries !== null || this.#enabled);
    this.#fileBytes = read.bytes;
    this.#logger.log("info", "auth.keys_reloaded", {
      file: this.#path,
      reason: "changed_on_disk",
      keys: this.#byId.size,
      invalidated,
    });
  }

  /**
   * Makes `entries` the usable keys (less those being revoked): unchanged keys keep their
   * principals, the others' are invalidated and listeners told. Returns how many were.
   */
  #replace(entries: readonly Entry[], enabled: boolean): number {
    const invalidated: KeyPrincipal[] = [];
    const next = new Map<string, Entry>();
    for (const entry of entries) {
      const old = this.#byId.get(entry.info.id);
      if (old !== undefined && sameKey(old, entry)) {
        // Keep the old principal (and the newer of the two last-used times).
        if ((entry.info.last_used_ms ?? 0) > (old.info.last_used_ms ?? 0))
          old.info.last_used_ms = entry.info.last_used_ms;
        next.set(old.info.id, old);
      } else {
        next.set(entry.info.id, entry);
        if (old !== undefined) invalidated.push(old.principal);
      }
    }
    for (const [id, old] of this.#byId) if (!next.has(id)) invalidated.push(old.principal);
    // A key revoked but not yet written out stays revoked even if the file still holds it.
    for (const revoking of this.#revoking.values()) next.delete(revoking.info.id);
    this.#byId = new Map();
    this.#byName = new Map();
    for (const entry of next.values()) this.#add(entry);
    this.#enabled = enabled;
    this.#emit({ invalidated });
    return invalidated.length;
  }

  /** Waits for a background `last_used_ms` write, then refuses further changes. */
  async close(): Promise<void> {
    await this.#lastUsedWrite;
    await this.#mutex.run(async () => {
      this.#closed = true;
    });
  }

  #checkOpen(): void {
    if (this.#closed)
      throw new BrokerError(
        Errors.unavailable,
        "Cannot change API keys: the broker is shutting down",
      );
  }

  #add(entry: Entry): void {
    this.#byId.set(entry.info.id, entry);
    this.#byName.set(entry.info.name, entry);
  }

  #remove(entry: Entry): void {
    this.#byId.delete(entry.info.id);
    this.#byName.delete(entry.info.name);
  }

  /**
   * True if a key with id `id` was revoked (or removed from the file) since this process started:
   * `auth.failed` then says `revoked` rather than `unknown`. Ids only (not secret), the last
   * {@link goneIdsMax}; after a restart a revoked key is `unknown` again.
   */
  wasRevoked(id: string): boolean {
    return this.#goneIds.has(id);
  }

  #emit(change: KeyStoreChange): void {
    for (const principal of change.invalidated)
      if (!this.#byId.has(principal.id)) {
        this.#goneIds.delete(principal.id);
        this.#goneIds.add(principal.id);
        if (this.#goneIds.size > goneIdsMax)
          this.#goneIds.delete(this.#goneIds.values().next().value as string);
      }
    for (const listener of [...this.#listeners]) {
      try {
        listener(change);
      } catch (err) {
        this.#logger.log("error", "auth.listener_failed", {
          error: err instanceof Error ? err.message : String(err),
        });
      }
    }
  }

  /** Writes `entries` as the whole file, atomically and durably. */
  async #write(entries: readonly Entry[], action: string): Promise<void> {
    const file = {
      version: apiKeysFileVersion,
      keys: entries.map((e) => ({ ...copyInfo(e.info), hash: e.hash })),
    };
    const bytes = utf8(`${JSON.stringify(file, null, 2)}\n`);
    try {
      await writeFileAtomic(this.#fs!, this.#path, bytes);
    } catch (err) {
      if (err instanceof FsError) throw storageFailure(action, err);
      throw err;
    }
    this.#fileBytes = bytes;
    for (const e of entries) e.lastUsedWrittenMs = e.info.last_used_ms;
  }
}

function copyInfo(info: ApiKeyInfo): ApiKeyInfo {
  return {
    id: info.id,
    name: info.name,
    role: info.role,
    topics: [...info.topics],
    groups: [...info.groups],
    created_ms: info.created_ms,
    last_used_ms: info.last_used_ms,
  };
}

function makeEntry(info: ApiKeyInfo, hash: string): Entry {
  const principal: KeyPrincipal = Object.freeze({
    kind: "key",
    id: info.id,
    name: info.name,
    role: info.role,
    topics: Object.freeze([...info.topics]),
    groups: Object.freeze([...info.groups]),
  });
  return {
    info,
    hash,
    digest: fromHex(hash.slice("sha256:".length)),
    principal,
    lastUsedWrittenMs: info.last_used_ms,
  };
}

/** Same key with the same rights (a reload keeps its principal). */
function sameKey(a: Entry, b: Entry): boolean {
  return (
    a.hash === b.hash &&
    a.info.name === b.info.name &&
    a.info.role === b.info.role &&
    a.info.topics.join("\n") === b.info.topics.join("\n") &&
    a.info.groups.join("\n") === b.info.groups.join("\n")
  );
}

/**
 * Reads and checks the key file: null if it does not exist, else its entries.
 * @throws KeyStoreError naming the file and the first problem (never a value from the file).
 */
async function readKeyFile(
  fs: FileSystem,
  path: string,
): Promise<{ entries: Entry[] | null; bytes: Uint8Array | null }> {
  const read = await readJsonFile(fs, path);
  if ("missing" in read) return { entries: null, bytes: null };
  if ("error" in read) throw new KeyStoreError(path, read.error);
  const file = read.value;
  if (typeof file !== "object" || file === null || Array.isArray(file))
    throw new KeyStoreError(path, 'the file must hold a JSON object like {"version":1,"keys":[]}');
  const { version, keys } = file as { version?: unknown; keys?: unknown };
  if (version !== apiKeysFileVersion)
    throw new KeyStoreError(path, `"version" must be ${apiKeysFileVersion}`);
  if (!Array.isArray(keys)) throw new KeyStoreError(path, '"keys" must be a list');
  if (keys.length > apiKeysMax)
    throw new KeyStoreError(path, `it holds more than ${apiKeysMax} keys`);
  const entries: Entry[] = [];
  const ids = new Set<string>();
  const names = new Set<string>();
  keys.forEach((raw: unknown, index) => {
    const where = `keys[${index}]`;
    let stored: StoredKey;
    try {
      stored = parseStoredKey(raw, where);
    } catch (err) {
      throw new KeyStoreError(path, err instanceof Error ? err.message : String(err));
    }
    if (ids.has(stored.info.id))
      throw new KeyStoreError(path, `${where}.id repeats an earlier key's id`);
    if (names.has(stored.info.name))
      throw new KeyStoreError(path, `${where}.name repeats an earlier key's name`);
    ids.add(stored.info.id);
    names.add(stored.info.name);
    entries.push(makeEntry(stored.info, stored.hash));
  });
  return { entries, bytes: read.bytes };
}

/**
 * Reads one stored key (an entry of `api_keys.json`, or a key record in etcd), checking every
 * field as the file's reader does.
 * @param where names the entry in messages, e.g. `keys[3]`.
 * @throws Error naming the entry and the first problem (never a value of it).
 */
export function parseStoredKey(raw: unknown, where: string): StoredKey {
  if (typeof raw !== "object" || raw === null || Array.isArray(raw))
    throw new Error(`${where} must be an object`);
  const k = raw as Record<string, unknown>;
  for (const field of Object.keys(k))
    if (!entryFields.has(field)) throw new Error(`${where} has an unknown field ${quote(field)}`);
  if (typeof k.id !== "string" || !idPattern.test(k.id))
    throw new Error(`${where}.id must be 16 lower-case hex digits`);
  if (typeof k.hash !== "string" || !hashPattern.test(k.hash))
    throw new Error(`${where}.hash must be "sha256:" and 64 lower-case hex digits`);
  if (!Number.isSafeInteger(k.created_ms) || (k.created_ms as number) < 0)
    throw new Error(`${where}.created_ms must be a non-negative integer`);
  if (
    k.last_used_ms !== null &&
    (!Number.isSafeInteger(k.last_used_ms) || (k.last_used_ms as number) < 0)
  )
    throw new Error(`${where}.last_used_ms must be null or a non-negative integer`);
  let checked;
  try {
    checked = validateKeySpec({ name: k.name, role: k.role, topics: k.topics, groups: k.groups });
  } catch (err) {
    throw new Error(`${where}: ${err instanceof Error ? err.message : String(err)}`);
  }
  return {
    info: {
      id: k.id,
      ...checked,
      created_ms: k.created_ms as number,
      last_used_ms: (k.last_used_ms as number | null) ?? null,
    },
    hash: k.hash,
  };
}

/** The JSON object a stored key is written as (`api_keys.json`'s entries, etcd's key records). */
export function storedKeyJson(key: StoredKey): Record<string, unknown> {
  return { ...copyInfo(key.info), hash: key.hash };
}
