/**
 * The connection to etcd with TLS and etcd's user authentication (docs/cluster.md "etcd with TLS
 * and authentication") through the real process, on every target: the etcd client is
 * runtime-specific (`node:https` with a CA and a client certificate on Node, Deno, Bun and the
 * binary). One etcd member serving TLS, requiring client certificates, with authentication on; a
 * broker joins with `--cluster etcds://` and serves a topic; a broker without the CA, without a
 * client certificate, or with a wrong password is refused at start with a message naming the
 * problem (and the user, never the password). The password appears in no output.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type EtcdCluster, startEtcdCluster } from "../helpers/etcd.ts";
import { runCli, startBroker, target } from "./harness.ts";
import { makeClientLeaf, makePki, type Pki } from "./pki.ts";

const password = "etcd-pw-5b8e1d2f-never-shown";
let etcd: EtcdCluster;
let pki: Pki;
let root: string;
let etcdClient: { cert: string; key: string };
let passwordFile: string;

/** The cluster options of broker `id`, with the etcd options given. */
function clusterArgs(id: number, etcdOptions: string[]): string[] {
  return [
    ...["--cluster", etcd.clusterUrl, "--node-id", String(id)],
    ...["--advertise-tcp", "127.0.0.1:1", "--advertise-http", "http://127.0.0.1:2"],
    ...etcdOptions,
  ];
}

const ca = () => ["--cluster-etcd-ca", pki.ca];
const cert = () => ["--cluster-etcd-cert", etcdClient.cert, "--cluster-etcd-key", etcdClient.key];
const user = (file = passwordFile) => [
  ...["--cluster-etcd-user", "broker", "--cluster-etcd-password-file", file],
];

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), "es-broker-etcd-tls-e2e-"));
  pki = makePki(join(root, "pki"));
  etcdClient = makeClientLeaf(pki, "etcd-client", "/O=es-broker");
  passwordFile = join(root, "etcd.password");
  writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 });
  etcd = await startEtcdCluster({
    size: 1,
    tls: { ...pki.server, ca: pki.ca, clientCertAuth: true, client: etcdClient },
    auth: {
      rootPassword: "root-pw-e2e",
      users: [{ name: "broker", password, prefix: "/es-broker/" }],
    },
  });
}, 60_000);

afterAll(async () => {
  await etcd?.stop();
  if (root) rmSync(root, { recursive: true, force: true });
});

describe(`[${target}] etcd with TLS and authentication`, () => {
  it("a broker joins over etcds:// with a client certificate and a user, and serves a topic", async () => {
    const b = await startBroker(join(root, "n1"), clusterArgs(1, [...ca(), ...cert(), ...user()]));
    try {
      const created = await fetch(`${b.httpUrl}/v1/topics`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ name: "over-tls", partitions: 1 }),
      });
      expect(created.status, await created.text()).toBe(201);
      const produced = await fetch(`${b.httpUrl}/v1/topics/over-tls/records`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ records: [{ value: "hello" }] }),
      });
      expect(produced.status, await produced.text()).toBe(200);
      // SIGHUP re-reads the etcd files (like --cluster-tls-ca) and the password file.
      b.proc.kill("SIGHUP");
      const deadline = Date.now() + 10_000;
      while (!/cluster\.etcd_password_reloaded/.test(b.stderr()) && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 50));
      expect(b.stderr()).toMatch(/tls\.etcd_reloaded/);
      expect(b.stderr()).toMatch(/cluster\.etcd_password_reloaded/);
    } finally {
      expect(await b.stop()).toBe(0);
    }
    expect(b.stderr()).not.toContain(password);
  });

  it("refuses to start without the CA, without a client certificate, or with a wrong password, saying why", async () => {
    const wrongFile = join(root, "wrong.password");
    writeFileSync(wrongFile, "not-the-password-91\n", { mode: 0o600 });
    const serve = (id: number) => [
      ...["serve", "--data-dir", join(root, `n${id}`), "--http-port", "0", "--tcp-port", "0"],
    ];
    const [noCa, noCert, wrong] = await Promise.all([
      runCli([...serve(2), ...clusterArgs(2, [...cert(), ...user()])]),
      runCli([...serve(3), ...clusterArgs(3, [...ca(), ...user()])]),
      runCli([...serve(4), ...clusterArgs(4, [...ca(), ...cert(), ...user(wrongFile)])]),
    ]);
    expect(noCa.code, noCa.stderr).toBe(1);
    expect(noCa.stderr).toMatch(/etcd's certificate is not trusted.*pass --cluster-etcd-ca FILE/);
    expect(noCert.code, noCert.stderr).toBe(1);
    expect(noCert.stderr).toMatch(/--client-cert-auth needs a client certificate/);
    expect(wrong.code, wrong.stderr).toBe(1);
    expect(wrong.stderr).toMatch(/etcd refused user "broker".*wrong password, or no such user/);
    for (const r of [noCa, noCert, wrong]) {
      expect(r.stderr).not.toContain(password);
      expect(r.stderr).not.toContain("not-the-password-91");
      expect(r.stdout.toString()).toBe("");
    }
  });
});
