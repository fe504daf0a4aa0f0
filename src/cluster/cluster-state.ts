/**
 * The state a cluster shares besides topics: the schema registry (`cluster-registry.ts`), kept
 * in etcd and read from a watch-fed copy on every broker (docs/cluster.md "Schema registry and API keys in etcd"). `serve --cluster` opens it
 * after the broker joined, before any front door serves.
 *
 * Layer rule: no `node:*`; time through {@link Clock}.
 */
import type { Clock } from "../lib/clock.ts";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import type { SchemaRegistry } from "../registry/registry.ts";
import { ClusterRegistryStore } from "./cluster-registry.ts";
import { type Etcd, EtcdError } from "./etcd.ts";

/** Options of {@link openClusterState}. */
export interface ClusterStateOptions {
  etcd: Etcd;
  /** The cluster prefix, without a trailing slash. */
  prefix: string;
  clock: Clock;
  logger: Logger;
  /** A fresh random hex token per registry write. */
  randomToken(): string;
  /** The data directory's registry (`schemas.json`). */
  local: { registry: SchemaRegistry; registryPath: string };
  /** Stops the retries while etcd is unreachable (a signal during start-up). */
  signal?: { aborted: boolean };
}

/** The cluster's registry, for the broker and its front doors. */
export interface ClusterState {
  registry: SchemaRegistry;
  /** Stops the watch (the registry is closed by its user). */
  close(): Promise<void>;
}

/**
 * Reads the cluster's registry (importing or checking the data directory's own, as
 * `cluster-registry.ts` says) and starts watching it. While etcd cannot be reached it retries with
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
      const store = registryStore;
      return { registry: opened.registry, close: () => store.close() };
    } catch (err) {
      await registryStore?.close();
      // Every step can run again: an import already made is found and checked.
      if (!(err instanceof EtcdError)) throw err;
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
