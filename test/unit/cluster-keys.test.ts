/**
 * The cluster's API keys in etcd (src/cluster/cluster-keys.ts) on an in-memory etcd
 * (test/helpers/fake-etcd.ts): a key made on one broker verifies on another once the watch
 * brings it, a revocation on one invalidates the principal on the other (what closes its open
 * connections), names are unique across brokers, a data directory's keys are imported once and
 * a revoked one never again, and etcd holds no key text. Real processes: test/e2e/cluster-state.test.ts.
 */
import { afterEach, describe, expect, it } from "vitest";
import { apiKeyIdChars, apiKeyPrefix, apiKeySecretChars } from "../../src/auth/key-format.ts";
import { AccessControl } from "../../src/auth/access.ts";
import type { KeyStore, StoredKey } from "../../src/auth/key-store.ts";
import type { Broker } from "../../src/broker/types.ts";
import type { BrokerError } from "../../src/broker/errors.ts";
import { ClusterKeyBackend } from "../../src/cluster/cluster-keys.ts";
import { silentLogger } from "../../src/lib/logger.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { systemKeyCrypto } from "../../src/runtime/crypto.ts";
import { FakeEtcd } from "../helpers/fake-etcd.ts";

const prefix = "/es-broker";
const backends: ClusterKeyBackend[] = [];

afterEach(async () => {
  for (const b of backends.splice(0)) await b.close();
});

async function broker(
  etcd: FakeEtcd,
  local: readonly StoredKey[] | null = null,
): Promise<KeyStore> {
  const { backend, keys } = await ClusterKeyBackend.open({
    etcd,
    prefix,
    clock: systemClock,
    crypto: systemKeyCrypto,
    logger: silentLogger,
    local: local === null ? null : { keys: local, path: "/data/api_keys.json" },
  });
  backends.push(backend);
  return keys;
}

const settle = () => new Promise((r) => setTimeout(r, 5));

describe("cluster API keys in etcd", () => {
  it("a key made on one broker works on the others; revoked on one, it is invalidated on all", async () => {
    const etcd = new FakeEtcd();
    const [one, two, three] = [await broker(etcd), await broker(etcd), await broker(etcd)];
    expect(one.enabled).toBe(false);
    const made = await one.create({ name: "ingest", role: "producer", topics: ["orders"] });
    await settle();
    const onThree = three.verify(made.key);
    expect(onThree?.name).toBe("ingest");
    expect(two.enabled && three.enabled).toBe(true);
    const invalidated: string[] = [];
    three.onChange((change) => invalidated.push(...change.invalidated.map((p) => p.name)));
    await two.revoke("ingest");
    await settle();
    expect(invalidated).toEqual(["ingest"]);
    expect(three.isCurrent(onThree!)).toBe(false);
    expect(one.verify(made.key)).toBeNull();
    expect(two.list()).toEqual([]);
    // Authentication stays on with no key left.
    expect(three.enabled).toBe(true);
  });

  it("a name is unique across brokers, even made at the same moment", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const b = await broker(etcd);
    const outcomes = await Promise.allSettled([
      a.create({ name: "admin", role: "admin" }),
      b.create({ name: "admin", role: "admin" }),
    ]);
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
    const refused = outcomes.find((o) => o.status === "rejected") as PromiseRejectedResult;
    expect((refused.reason as BrokerError).kind.code).toBe("key_exists");
  });

  it("revokes a key another broker made that this one has not seen yet", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const b = await broker(etcd);
    etcd.holdWatches();
    const made = await a.create({ name: "late", role: "admin" });
    expect((await b.revoke("late")).id).toBe(made.info.id);
    etcd.releaseWatches();
    await settle();
    expect(a.verify(made.key)).toBeNull();
  });

  it("refuses changes while etcd is down and keeps authenticating with the keys it has", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const made = await a.create({ name: "admin", role: "admin" });
    etcd.down = true;
    const error = await a.create({ name: "other", role: "admin" }).catch((e: unknown) => e);
    expect((error as BrokerError).kind.code).toBe("unavailable");
    expect((error as BrokerError).message).toMatch(/cannot be reached, nothing was changed/);
    expect(a.verify(made.key)?.name).toBe("admin");
  });

  it("imports a data directory's keys once; a key revoked in the cluster is never imported again", async () => {
    const etcd = new FakeEtcd();
    const source = await broker(new FakeEtcd());
    const made = await source.create({ name: "boot", role: "admin" });
    const local = source.stored();
    const first = await broker(etcd, local);
    expect(first.verify(made.key)?.name).toBe("boot");
    await first.revoke("boot");
    const restarted = await broker(etcd, local);
    expect(restarted.verify(made.key)).toBeNull();
    expect(restarted.enabled).toBe(true);
  });

  it("stores hashes only: no key text in etcd", async () => {
    const etcd = new FakeEtcd();
    const a = await broker(etcd);
    const made = await a.create({ name: "secret-holder", role: "admin" });
    // esb_<id>_<secret>: the id is hex, the secret base64url (which may itself hold "_").
    const secret = made.key.slice(apiKeyPrefix.length + apiKeyIdChars + 1);
    expect(secret.length).toBe(apiKeySecretChars);
    for (const kv of etcd.kvs.values()) {
      expect(kv.value).not.toContain(secret);
      expect(kv.value).not.toContain(made.key);
    }
    expect(JSON.parse(etcd.kvs.get(`${prefix}/auth/keys/secret-holder`)!.value).hash).toMatch(
      /^sha256:[0-9a-f]{64}$/,
    );
  });

  it("key_revoked in cluster mode names etcd, not api_keys.json (which cluster mode does not use)", async () => {
    const etcd = new FakeEtcd();
    const [one, two] = [await broker(etcd), await broker(etcd)];
    expect(one.clustered).toBe(true);
    const made = await one.create({ name: "reader", role: "consumer", topics: ["orders"] });
    await settle();
    // The message is all that is under test: AccessControl never calls the broker for it.
    const access = new AccessControl({ broker: {} as Broker, keys: two, logger: silentLogger });
    const principal = two.verify(made.key)!;
    await one.revoke("reader");
    await settle();
    const error = access.invalidError(principal, 'Cannot fetch from topic "orders"');
    expect(error.kind.code).toBe("key_revoked");
    expect(error.message).toBe(
      `Cannot fetch from topic "orders": API key ${made.info.id} was revoked (es-broker keys revoke; the cluster keeps its keys in etcd, so every broker refuses it now) while this connection was open`,
    );
    expect(error.message).not.toContain("api_keys.json");
  });
});
