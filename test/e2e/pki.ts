/**
 * Certificate authorities for the end-to-end TLS tests (`tls.test.ts`, `kafka.test.ts`), made by
 * the `openssl` CLI in a temporary directory, and a probe of the certificate a port serves.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import * as tls from "node:tls";
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

/**
 * Two CAs and leaf certificates, made with the openssl CLI (EC P-256, valid 2 days), in `dir`
 * (default: a temporary directory removed when the current test finishes; pass one to call this
 * outside a test, e.g. in `beforeAll`).
 */
export function makePki(dir: string = tempDir("es-broker-tls-").dir): Pki {
  mkdirSync(dir, { recursive: true });
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
    return { cert: join(dir, `${name}.pem`), key: join(dir, `${name}.key`) };
  };
  ca("ca-a");
  ca("ca-b");
  return {
    dir,
    ca: join(dir, "ca-a.pem"),
    otherCa: join(dir, "ca-b.pem"),
    server: leaf("server-one", "ca-a", "server.ext"),
    rotated: leaf("server-two", "ca-a", "server.ext"),
    client: leaf("client-a", "ca-a", "client.ext"),
    otherClient: leaf("client-b", "ca-b", "client.ext"),
  };
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
