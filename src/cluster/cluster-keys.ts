/**
 * The API keys of a cluster, kept in etcd (docs/cluster.md "Schema registry and API keys in
 * etcd"): a key created or revoked through any broker holds on every broker.
 *
 * Keys under the cluster prefix (`keys.ts`), holding hashes and metadata only — never a key's
 * text (that is shown once to its creator and stored nowhere):
 * - `auth/keys/<name>`: the key's record, as an entry of `api_keys.json` (id, name, role,
 *   patterns, `sha256:` hash, `created_ms`; `last_used_ms` null: last use is kept per broker).
 * - `auth/revoked/<id>`: `{name, revoked_ms}`, written when the key is revoked, so that no
 *   broker imports a revoked key again from its own `api_keys.json`.
 * - `auth/enabled`: present once the cluster has had a key; authentication is then on for good.
 *
 * Create is one transaction comparing the name's and the id's absence; revoke one comparing the
 * record's `mod_revision` (deletes it, writes the revocation). Every broker keeps a copy fed by
 * a watch (`etcd-mirror.ts`) and hands each change to its {@link KeyStore} (`adopt`), which
 * invalidates the principals of keys that went: the transports close their open TCP and Kafka
 * connections and event streams (`key_revoked`), as on a single broker's revoke. So a
 * revocation reaches every broker that can reach etcd within the watch's delay (milliseconds;
 * a broken watch stream is noticed within 3 s and resumed on another member).
 *
 * Bootstrap, as on a single broker: `es-broker keys create --data-dir DIR` on a stopped broker
 * writes its `api_keys.json`; when that broker starts in cluster mode, each key of the file that
 * the cluster has neither (by name) nor revoked (by id) is imported into etcd.
 *
 * Layer rule: no `node:*`; time through {@link Clock}.
 */
import { BrokerError, Errors } from "../broker/errors.ts";
import type { KeyCrypto } from "../auth/crypto.ts";
import {
  KeyStore,
  type KeyStoreBackend,
  parseStoredKey,
  type StoredKey,
  storedKeyJson,
} from "../auth/key-store.ts";
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import { clip } from "../lib/quote.ts";
import { type Etcd, EtcdError, type EtcdKeyValue } from "./etcd.ts";
import { EtcdMirror } from "./etcd-mirror.ts";
import { apiKeyKey, authEnabledKey, revokedKeyKey } from "./keys.ts";

/** Options of {@link ClusterKeyBackend.open}. */
export interface ClusterKeysOptions {
  etcd: Etcd;
  /** The cluster prefix, without a trailing slash. */
  prefix: string;
  clock: Clock;
  crypto: KeyCrypto;
  logger: Logger;
  /** The data directory's own keys (`api_keys.json`; null when the file does not exist): imported. */
  local: { keys: readonly StoredKey[]; path: string } | null;
}

/** How many times a revoke is tried again when the record changed under it. */
const revokeAttemptsMax = 8;

/** See the module comment. */
export class ClusterKeyBackend implements KeyStoreBackend {
  readonly where: string;
  readonly #o: ClusterKeysOptions;
  #mirror: EtcdMirror | null = null;
  #store: KeyStore | null = null;

  private constructor(options: ClusterKeysOptions) {
    this.#o = options;
    this.where = `etcd keys under ${options.prefix}/auth/`;
  }

  /**
   * Imports the data directory's keys, reads the cluster's, starts watching them, and returns
   * the key store every front door authenticates with.
   * @throws EtcdError if etcd fails.
   */
  static async open(
    options: ClusterKeysOptions,
  ): Promise<{ backend: ClusterKeyBackend; keys: KeyStore }> {
    const backend = new ClusterKeyBackend(options);
    if (options.local !== null) await backend.#import(options.local.keys, options.local.path);
    backend.#mirror = await EtcdMirror.start({
      etcd: options.etcd,
      prefix: `${options.prefix}/auth/`,
      clock: options.clock,
      logger: options.logger,
      name: "api_keys",
      onChange: () => backend.#handOver(),
    });
    const { keys, enabled } = backend.#read(backend.#mirror);
    backend.#store = KeyStore.withBackend(
      { backend, crypto: options.crypto, clock: options.clock, logger: options.logger },
      keys,
      enabled,
    );
    return { backend, keys: backend.#store };
  }

  async create(key: StoredKey): Promise<"created" | "exists"> {
    const { etcd, prefix } = this.#o;
    const recordKey = apiKeyKey(prefix, key.info.name);
    const value = JSON.stringify(storedKeyJson(key));
    const action = `Cannot create key ${JSON.stringify(key.info.name)}`;
    let result;
    try {
      result = await etcd.txn({
        compare: [
          { key: recordKey, target: "version", result: "equal", number: 0 },
          {
            key: revokedKeyKey(prefix, key.info.id),
            target: "version",
            result: "equal",
            number: 0,
          },
        ],
        success: [
          { put: { key: recordKey, value } },
          { put: { key: authEnabledKey(prefix), value: "1" } },
        ],
      });
    } catch (err) {
      if (!(err instanceof EtcdError && err.code === "indeterminate"))
        throw this.#unavailable(action, err);
      // Settled by reading back: the record holds this key's id only if this write made it.
      let found: EtcdKeyValue | null;
      try {
        found = await etcd.get(recordKey);
      } catch (readErr) {
        throw this.#unavailable(`${action} (outcome unknown: list the keys)`, readErr);
      }
      if (found === null) throw this.#unavailable(action, err);
      this.#mirror?.absorb(found);
      return this.#idOf(found) === key.info.id ? "created" : "exists";
    }
    if (!result.succeeded) return "exists";
    this.#mirror?.absorb(kv(authEnabledKey(prefix), "1", result.revision));
    this.#mirror?.absorb(kv(recordKey, value, result.revision));
    return "created";
  }

  async revoke(name: string): Promise<StoredKey | null> {
    const { etcd, prefix, clock } = this.#o;
    const recordKey = apiKeyKey(prefix, name);
    const action = `Cannot revoke key ${JSON.stringify(clip(name))}`;
    for (let attempt = 1; ; attempt++) {
      let found: EtcdKeyValue | null;
      try {
        found = await etcd.get(recordKey);
      } catch (err) {
        throw this.#unavailable(action, err);
      }
      if (found === null) return null;
      const stored = this.#parse(found);
      const revokedValue = JSON.stringify({ name, revoked_ms: clock.nowMs() });
      let result;
      try {
        result = await etcd.txn({
          compare: [
            { key: recordKey, target: "mod_revision", result: "equal", number: found.modRevision },
          ],
          success: [
            { delete: { key: recordKey } },
            ...(stored === null
              ? []
              : [{ put: { key: revokedKeyKey(prefix, stored.info.id), value: revokedValue } }]),
          ],
        });
      } catch (err) {
        // An indeterminate delete is settled by the next attempt's read (gone: revoked).
        if (err instanceof EtcdError && err.code === "indeterminate" && attempt < revokeAttemptsMax)
          continue;
        throw this.#unavailable(action, err);
      }
      if (result.succeeded) {
        this.#mirror?.absorbDelete(recordKey, result.revision);
        return stored;
      }
      if (attempt >= revokeAttemptsMax)
        throw new BrokerError(
          Errors.unavailable,
          `${action}: the key's record kept changing in etcd; try again`,
        );
    }
  }

  /** Stops the watch. */
  async close(): Promise<void> {
    await this.#mirror?.close();
  }

  #unavailable(action: string, err: unknown): BrokerError {
    return new BrokerError(
      Errors.unavailable,
      `${action}: the cluster's API keys in etcd cannot be reached, nothing was changed: ${errorMessage(err)}`,
    );
  }

  #idOf(found: EtcdKeyValue): string | null {
    return this.#parse(found)?.info.id ?? null;
  }

  /** A key record, or null (logged) for one that breaks a rule. */
  #parse(found: EtcdKeyValue): StoredKey | null {
    try {
      return parseStoredKey(JSON.parse(found.value), found.key);
    } catch (err) {
      this.#o.logger.log("error", "auth.bad_key_record", {
        key: found.key,
        error: errorMessage(err),
      });
      return null;
    }
  }

  /** The keys and the enabled flag of the copy. */
  #read(mirror: EtcdMirror): { keys: StoredKey[]; enabled: boolean } {
    const { prefix } = this.#o;
    const keys: StoredKey[] = [];
    const ids = new Set<string>();
    for (const found of mirror.values(`${prefix}/auth/keys/`)) {
      const stored = this.#parse(found);
      if (stored === null || ids.has(stored.info.id)) continue;
      ids.add(stored.info.id);
      keys.push(stored);
    }
    return { keys, enabled: mirror.get(authEnabledKey(prefix)) !== undefined };
  }

  #handOver(): void {
    if (this.#store === null || this.#mirror === null) return;
    const { keys, enabled } = this.#read(this.#mirror);
    this.#store.adopt(keys, enabled);
  }

  /** Imports the data directory's keys (module comment). */
  async #import(keys: readonly StoredKey[], path: string): Promise<void> {
    const { etcd, prefix, logger } = this.#o;
    // The file exists: authentication is on, in the whole cluster, even with no key in it.
    if (keys.length === 0) await etcd.put(authEnabledKey(prefix), "1");
    for (const key of keys) {
      const created = await this.create({
        info: { ...key.info, last_used_ms: null },
        hash: key.hash,
      });
      if (created === "created")
        logger.log("info", "auth.key_imported", {
          file: path,
          name: key.info.name,
          id: key.info.id,
        });
      else {
        const there = await etcd.get(apiKeyKey(prefix, key.info.name));
        if (there === null || this.#idOf(there) !== key.info.id)
          logger.log("warn", "auth.key_not_imported", {
            file: path,
            name: key.info.name,
            id: key.info.id,
            reason:
              there === null
                ? "the cluster revoked this key"
                : "the cluster has another key of that name",
          });
      }
    }
  }
}

function kv(key: string, value: string, modRevision: number): EtcdKeyValue {
  return { key, value, createRevision: modRevision, modRevision, version: 1, lease: "0" };
}
