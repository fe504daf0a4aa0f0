/**
 * The state a cluster shares besides topics: the schema registry (`cluster-registry.ts`) and
 * the API keys (`cluster-keys.ts`), both kept in etcd and read from a watch-fed copy on every
 * broker (docs/cluster.md "Schema registry and API keys in etcd"). `serve --cluster` opens it
 * after the broker joined, before any front door serves.
 *
 * Layer rule: no `node:*`; time through {@link Clock}.
 */
import type { KeyCrypto } from "../auth/crypto.ts";
import { BrokerError, Errors } from "../broker/errors.ts";
import type { KeyStore } from "../auth/key-store.ts";
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import type { SchemaRegistry } from "../registry/registry.ts";
import { ClusterKeyBackend } from "./cluster-keys.ts";
import { ClusterRegistryStore } from "./cluster-registry.ts";
import { type Etcd, EtcdError } from "./etcd.ts";

/** Options of {@link openClusterState}. */
export interface ClusterStateOptions {
  etcd: Etcd;
  /** The cluster prefix, without a trailing slash. */
  prefix: string;
  clock: Clock;
  crypto: KeyCrypto;
  logger: Logger;
  /** A fresh random hex token per registry write. */
  randomToken(): string;
  /** The data directory's registry (`schemas.json`) and key store (`api_keys.json`). */
  local: { registry: SchemaRegistry; registryPath: string; keys: KeyStore };
  /** Stops the retries while etcd is unreachable (a signal during start-up). */
  signal?: { aborted: boolean };
}

/** The cluster's registry and keys, for the broker and its front doors. */
export interface ClusterState {
  registry: SchemaRegistry;
  keys: KeyStore;
  /** Stops both watches (the registry and the key store are closed by their users). */
  close(): Promise<void>;
}

/**
 * Reads the cluster's registry and keys (importing or checking the data directory's own, as
 * the two modules say) and starts watching them. While etcd cannot be reached it retries with
 * backoff (100 ms doubling to 5 s), logging `cluster.state_unavailable`.
 * @throws RegistryJoinError when the data directory's `schemas.json` conflicts with the cluster's
 *   registry (the start is refused); Error when stopped by `signal`.
 */
export async function openClusterState(options: ClusterStateOptions): Promise<ClusterState> {
  const { logger, local } = options;
  let waitMs = 100;
  for (;;) {
    let registryStore: ClusterRegistryStore | null = null;
    try {
      const reason = local.registry.unavailableReason;
      if (reason !== null)
        logger.log("warn", "registry.local_file_ignored", {
          file: local.registryPath,
          reason: `cluster mode keeps the registry in etcd, and the file cannot be read to check it against it: ${reason}`,
        });
      const opened = await ClusterRegistryStore.open({
        etcd: options.etcd,
        prefix: options.prefix,
        clock: options.clock,
        logger,
        randomToken: options.randomToken,
        local:
          reason === null ? { state: local.registry.state, path: local.registryPath } : undefined,
      });
      registryStore = opened.store;
      const keys = await ClusterKeyBackend.open({
        etcd: options.etcd,
        prefix: options.prefix,
        clock: options.clock,
        crypto: options.crypto,
        logger,
        local: local.keys.enabled ? { keys: local.keys.stored(), path: local.keys.path } : null,
      });
      const store = registryStore;
      return {
        registry: opened.registry,
        keys: keys.keys,
        close: async () => {
          await store.close();
          await keys.backend.close();
        },
      };
    } catch (err) {
      await registryStore?.close();
      // Every step can run again: an import already made is found and checked.
      const retriable =
        err instanceof EtcdError || (err instanceof BrokerError && err.kind === Errors.unavailable);
      if (!retriable) throw err;
      if (options.signal?.aborted) throw err;
      logger.log("warn", "cluster.state_unavailable", {
        error: errorMessage(err),
        retry_ms: waitMs,
      });
      await new Promise<void>((resolve) => options.clock.setTimer(waitMs, resolve));
      waitMs = Math.min(waitMs * 2, 5000);
    }
  }
}
