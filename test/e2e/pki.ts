/**
 * Certificate authorities for the end-to-end TLS tests (`tls.test.ts`, `kafka.test.ts`), made by
 * the `openssl` CLI in a temporary directory, and a probe of the certificate a port serves.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as tls from "node:tls";
import { afterAll } from "vitest";
import { tempDir } from "../helpers/tmp.ts";

export interface Pki {
  dir: string;
  /** CA that signs the server and the good client certificate. */
  ca: string;
  /** Another CA: clients trusting it refuse the broker; its client certificate is refused. */
  otherCa: string;
  server: { cert: string; key: string };
  /** A second server certificate (the rotation), signed by `ca`. */
  rotated: { cert: string; key: string };
  client: { cert: string; key: string };
  otherClient: { cert: string; key: string };
}

/** This test file's certificates, made once ({@link makePki}); removed after its last test. */
let made: string | undefined;
afterAll(() => {
  if (made !== undefined) rmSync(made, { recursive: true, force: true });
  made = undefined;
});

/**
 * Two CAs and leaf certificates (EC P-256, valid 2 days), in `dir` (default: a temporary
 * directory removed when the current test finishes; pass one to call this outside a test, e.g. in
 * `beforeAll`). The openssl CLI makes them once per test file (ten runs, about a second on the
 * 2-vCPU machine; tls.test.ts wanted them thirteen times per target); each call copies them, so
 * every caller has files of its own to rotate or add to ({@link makeClientLeaf}).
 */
export function makePki(dir: string = tempDir("es-broker-tls-").dir): Pki {
  if (made === undefined) {
    const once = mkdtempSync(join(tmpdir(), "es-broker-pki-"));
    generatePki(once);
    made = once;
  }
  mkdirSync(dir, { recursive: true });
  cpSync(made, dir, { recursive: true });
  return pkiIn(dir);
}

/** The files of a PKI in `dir`, as {@link generatePki} names them. */
function pkiIn(dir: string): Pki {
  const leaf = (name: string) => ({
    cert: join(dir, `${name}.pem`),
    key: join(dir, `${name}.key`),
  });
  return {
    dir,
    ca: join(dir, "ca-a.pem"),
    otherCa: join(dir, "ca-b.pem"),
    server: leaf("server-one"),
    rotated: leaf("server-two"),
    client: leaf("client-a"),
    otherClient: leaf("client-b"),
  };
}

/** Makes the CAs and leaf certificates of {@link pkiIn} in `dir` with the openssl CLI. */
function generatePki(dir: string): void {
  const run = (args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const ca = (name: string) =>
    run([
      "req",
      "-x509",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.pem`,
      "-days",
      "2",
      "-subj",
      `/CN=${name}`,
    ]);
  writeFileSync(join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
  writeFileSync(join(dir, "client.ext"), "extendedKeyUsage=clientAuth\n");
  const leaf = (name: string, signer: string, ext: string) => {
    run([
      "req",
      "-newkey",
      "ec",
      "-pkeyopt",
      "ec_paramgen_curve:prime256v1",
      "-nodes",
      "-keyout",
      `${name}.key`,
      "-out",
      `${name}.csr`,
      "-subj",
      `/CN=${name}`,
    ]);
    run([
      "x509",
      "-req",
      "-in",
      `${name}.csr`,
      "-CA",
      `${signer}.pem`,
      "-CAkey",
      `${signer}.key`,
      "-CAcreateserial",
      "-out",
      `${name}.pem`,
      "-days",
      "2",
      "-extfile",
      ext,
    ]);
  };
  ca("ca-a");
  ca("ca-b");
  leaf("server-one", "ca-a", "server.ext");
  leaf("server-two", "ca-a", "server.ext");
  leaf("client-a", "ca-a", "client.ext");
  leaf("client-b", "ca-b", "client.ext");
}

/**
 * One more client certificate signed by `pki`'s CA (`ca-a`), with `subject` (e.g. `/O=es-broker`:
 * no CN, as etcd 3.4's gateway wants a client certificate once its authentication is on).
 */
export function makeClientLeaf(
  pki: Pki,
  name: string,
  subject: string,
): { cert: string; key: string } {
  const run = (args: string[]) => execFileSync("openssl", args, { cwd: pki.dir, stdio: "pipe" });
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  run(["req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", subject]);
  run([
    ...["x509", "-req", "-in", `${name}.csr`, "-CA", "ca-a.pem", "-CAkey", "ca-a.key"],
    ...["-CAcreateserial", "-out", `${name}.pem`, "-days", "2", "-extfile", "client.ext"],
  ]);
  return { cert: join(pki.dir, `${name}.pem`), key: join(pki.dir, `${name}.key`) };
}

/** The CN of the certificate a new TLS connection to `port` gets. */
export function certificateOf(port: number, ca: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = tls.connect({ host: "127.0.0.1", port, ca: readFileSync(ca) }, () => {
      resolve(socket.getPeerCertificate().subject.CN as string);
      socket.end();
    });
    socket.on("error", reject);
  });
}
