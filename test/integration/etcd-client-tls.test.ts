/**
 * The etcd client over TLS with etcd's user authentication (docs/cluster.md "etcd with TLS and
 * authentication"), on a real etcd serving its client port with TLS, requiring client
 * certificates, with authentication on and tokens that expire after 1 s unused: requests and
 * watches go on past a token's expiry (the client authenticates again), and each
 * misconfiguration fails with a message naming the problem (and the user, never the password).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { EtcdError, type EtcdEvent } from "../../src/cluster/etcd.ts";
import { EtcdHttpClient, type EtcdTlsMaterial } from "../../src/runtime/etcd.ts";
import { makeClientLeaf, makePki, type Pki } from "../e2e/pki.ts";
import { type EtcdCluster, startEtcdCluster } from "../helpers/etcd.ts";

const password = "pw-7f3a9c1e-not-in-any-message";
let etcd: EtcdCluster;
let pki: Pki;
let material: EtcdTlsMaterial;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "es-broker-etcd-tls-"));
  pki = makePki(dir);
  const client = makeClientLeaf(pki, "etcd-client", "/O=es-broker");
  material = {
    ca: readFileSync(pki.ca),
    cert: readFileSync(client.cert),
    key: readFileSync(client.key),
  };
  etcd = await startEtcdCluster({
    size: 1,
    tls: { ...pki.server, ca: pki.ca, clientCertAuth: true, client },
    auth: {
      rootPassword: "root-pw",
      users: [{ name: "broker", password, prefix: "/t/" }],
      tokenTtlSeconds: 1,
    },
  });
}, 60_000);

afterAll(async () => {
  await etcd?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

function client(
  options: { tls?: EtcdTlsMaterial; password?: string; user?: string | null } = {},
): EtcdHttpClient {
  const user = options.user === undefined ? "broker" : options.user;
  return new EtcdHttpClient(etcd.endpoints, {
    requestTimeoutMs: 2000,
    tls: () => options.tls ?? material,
    ...(user === null ? {} : { auth: { user, password: () => options.password ?? password } }),
  });
}

/** The EtcdError a promise rejects with. */
async function failure(p: Promise<unknown>): Promise<EtcdError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(EtcdError);
  return err as EtcdError;
}

describe("etcd over TLS with authentication", () => {
  it("reads and writes, and authenticates again once the token has expired", async () => {
    const c = client();
    try {
      await c.put("/t/a", "1");
      expect((await c.get("/t/a"))?.value).toBe("1");
      // A watch opened now stays open past the token's expiry (etcd checks it when created).
      const seen: EtcdEvent[] = [];
      const { revision } = await c.list("/t/");
      const early = c.watch(
        { key: "/t/", prefix: true, startRevision: revision + 1 },
        {
          onEvents: (events) => seen.push(...events),
        },
      );
      await new Promise((r) => setTimeout(r, 2500));
      // The token is gone (1 s unused): a new watch (canceled by etcd for its stale token, then
      // opened again) and a write authenticate again.
      const late: EtcdEvent[] = [];
      const second = c.watch(
        { key: "/t/b", startRevision: 1 },
        {
          onEvents: (events) => late.push(...events),
        },
      );
      await new Promise((r) => setTimeout(r, 100));
      await c.put("/t/b", "2");
      const deadline = Date.now() + 5000;
      while ((seen.length < 1 || late.length < 1) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      expect(seen.map((e) => e.kv.key)).toEqual(["/t/b"]);
      expect(late.map((e) => e.kv.value)).toEqual(["2"]);
      await early.cancel();
      await second.cancel();
      const lease = await c.leaseGrant(5);
      expect(await c.leaseKeepAlive(lease.id)).toBeGreaterThan(0);
    } finally {
      await c.close();
    }
  });

  it("refuses an etcd whose certificate it does not trust, naming --cluster-etcd-ca", async () => {
    const c = client({ tls: { cert: material.cert, key: material.key } });
    const err = await failure(c.get("/t/a"));
    expect(err.code).toBe("tls");
    expect(err.message).toMatch(/not trusted.*--cluster-etcd-ca/);
    await c.close();
  });

  it("uses new TLS material for new connections (SIGHUP's reload): a fixed CA heals it", async () => {
    let current: EtcdTlsMaterial = { ...material, ca: readFileSync(pki.otherCa) };
    const c = new EtcdHttpClient(etcd.endpoints, {
      requestTimeoutMs: 2000,
      tls: () => current,
      auth: { user: "broker", password: () => password },
    });
    try {
      expect((await failure(c.get("/t/a"))).code).toBe("tls");
      current = material;
      expect((await c.get("/t/a"))?.value).toBe("1");
    } finally {
      await c.close();
    }
  });

  it("says a client certificate is needed when etcd requires one", async () => {
    const c = client({ tls: { ca: material.ca } });
    const err = await failure(c.put("/t/a", "x"));
    expect(err.code).toBe("tls");
    expect(err.message).toMatch(/--client-cert-auth.*--cluster-etcd-cert/);
    await c.close();
  });

  it("names the user, never the password, when etcd refuses it", async () => {
    const c = client({ password: "wrong-password-42" });
    const err = await failure(c.get("/t/a"));
    expect(err.message).toMatch(/user "broker".*wrong password, or no such user/);
    expect(err.message).not.toContain("wrong-password-42");
    expect(err.message).not.toContain(password);
    await c.close();
  });

  it("says authentication is needed when no user is given", async () => {
    const c = client({ user: null });
    const err = await failure(c.get("/t/a"));
    // etcd answers "user name is empty" or, to a client certificate, "permission denied".
    expect(err.message).toMatch(/--cluster-etcd-user NAME and --cluster-etcd-password-file/);
    await c.close();
  });

  it("names the user and the prefix to grant for a key outside its role", async () => {
    const c = client();
    const err = await failure(c.get("/elsewhere"));
    expect(err.code).toBe("permission_denied");
    expect(err.message).toMatch(/user "broker" may not.*readwrite/);
    await c.close();
  });

  it("explains etcd 3.4's refusal of a client certificate with a Common Name", async () => {
    const c = client({ tls: { ...material, ...readPair(pki.client) } });
    const err = await failure(c.get("/t/a"));
    expect(err.message).toMatch(/without a CN/);
    await c.close();
  });

  it("says the port serves TLS when reached over plain HTTP", async () => {
    const plain = new EtcdHttpClient(
      etcd.endpoints.map((e) => e.replace("https:", "http:")),
      { requestTimeoutMs: 2000 },
    );
    const err = await failure(plain.get("/t/a"));
    expect(err.code).toBe("unavailable");
    expect(err.message).toMatch(/if etcd serves TLS on that port, use --cluster etcds:\/\//);
    await plain.close();
  });
});

function readPair(pair: { cert: string; key: string }): { cert: Buffer; key: Buffer } {
  return { cert: readFileSync(pair.cert), key: readFileSync(pair.key) };
}
