/**
 * TLS material for the listeners (`--tls-cert`, `--tls-key`, `--tls-client-ca`) and for clients
 * (`--tls-ca`, `--tls-insecure`, and a client certificate for mutual TLS), over `node:tls`, which
 * behaves the same on Node, Deno and Bun (checked: handshakes, client certificates, and
 * `setSecureContext` swapping the certificate for new connections while open ones keep theirs).
 *
 * PEM files are read whole and checked by building a secure context from them (and a client CA
 * bundle block by block: each must be a certificate that parses), so a bad file
 * fails at start (or on SIGHUP, keeping the old certificate) with a message naming the file and
 * never quoting its content.
 */
import * as fs from "node:fs";
import type * as net from "node:net";
import * as tls from "node:tls";
import { X509Certificate } from "node:crypto";
import type { Logger } from "../lib/logger.ts";
import type { RefusalLog } from "../lib/refusals.ts";

/** The listener side: where the PEM files are. */
export interface TlsServerFiles {
  /** Certificate chain (PEM), `--tls-cert`. */
  certPath: string;
  /** Private key (PEM, unencrypted), `--tls-key`. */
  keyPath: string;
  /** CA bundle (PEM) that client certificates must chain to, `--tls-client-ca`; when given, a client without a valid certificate is refused (mutual TLS). */
  clientCaPath?: string;
  /** Time a handshake may take before the connection is closed, in ms (`--tls-handshake-timeout-ms`; default {@link tlsHandshakeTimeoutMs}). */
  handshakeTimeoutMs?: number;
}

/** PEM contents read from {@link TlsServerFiles}, checked. */
export interface TlsServerMaterial {
  /** Options for `tls.createServer` / `setSecureContext` (cert, key, ca). */
  context: tls.SecureContextOptions;
  /** True with a client CA: certificates are requested and required. */
  mutual: boolean;
  /** Time a handshake may take before the connection is closed, in ms. */
  handshakeTimeoutMs: number;
  /** The certificate the listeners present (the first of `--tls-cert`), {@link describeCertificate}. */
  certificate: CertificateSummary;
}

/** Who a certificate names and until when it is valid (docs/operations.md "Certificates"). */
export interface CertificateSummary {
  /** The subject's distinguished name, its parts joined by ", " (e.g. "CN=broker.example"). */
  subject: string;
  /** The end of its validity (`notAfter`), in seconds since the epoch. */
  notAfterSeconds: number;
}

const months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/**
 * The subject and expiry of the first certificate in `pem` (the leaf of a chain). `validTo` is
 * OpenSSL's "Mon DD HH:MM:SS YYYY GMT", parsed here: `Date.parse` of that form is not the same on
 * every runtime.
 * @throws Error when `pem` holds no certificate or its `validTo` is not in that form.
 */
export function describeCertificate(pem: Buffer): CertificateSummary {
  const block = [...pem.toString("latin1").matchAll(pemBlock)].find((b) => b[1] === "CERTIFICATE");
  if (block === undefined) throw new Error("no CERTIFICATE block");
  const cert = new X509Certificate(block[0]);
  const m = /^([A-Z][a-z]{2}) +(\d{1,2}) (\d{2}):(\d{2}):(\d{2}) (\d{4}) GMT$/.exec(cert.validTo);
  const month = m === null ? -1 : months.indexOf(m[1]);
  if (m === null || month < 0) throw new Error(`unexpected certificate validTo ${cert.validTo}`);
  const notAfterMs = Date.UTC(+m[6], month, +m[2], +m[3], +m[4], +m[5]);
  return {
    subject: cert.subject.split("\n").filter(Boolean).join(", "),
    notAfterSeconds: notAfterMs / 1000,
  };
}

/** Longest PEM file read, in bytes (a chain of a few certificates is a few KiB). */
const pemBytesMax = 1024 * 1024;

/** Default time a TLS handshake may take before the connection is dropped, in ms (Node's default is 120 s). */
export const tlsHandshakeTimeoutMs = 10_000;

function readPem(path: string, option: string): Buffer {
  let bytes: Buffer;
  try {
    const size = fs.statSync(path).size;
    if (size > pemBytesMax) throw new Error(`it is ${size} bytes, more than ${pemBytesMax}`);
    bytes = fs.readFileSync(path);
  } catch (err) {
    throw new Error(
      `Cannot read ${option} file ${path}: ${err instanceof Error ? err.message : String(err)}`,
    );
  }
  if (!bytes.includes("-----BEGIN "))
    throw new Error(`Cannot use ${option} file ${path}: it holds no PEM block`);
  return bytes;
}

const pemBlock = /-----BEGIN ([A-Z0-9 ]+)-----[\s\S]*?-----END \1-----/g;

/**
 * Checks that `pem` holds only certificates, each of which parses. `node:tls` takes a CA bundle
 * without complaint even when nothing in it is a certificate (a private key, a damaged block): with
 * mutual TLS every client would then be refused, with nothing said at start or on SIGHUP.
 * @throws Error naming the file and the first block that is not a certificate (never its content).
 */
function checkCertificates(pem: Buffer, path: string, option: string): void {
  const blocks = [...pem.toString("latin1").matchAll(pemBlock)];
  if (blocks.length === 0)
    throw new Error(`Cannot use ${option} file ${path}: it holds no whole PEM block`);
  blocks.forEach((block, i) => {
    const which = `PEM block ${i + 1} of ${blocks.length}`;
    if (block[1] !== "CERTIFICATE")
      throw new Error(
        `Cannot use ${option} file ${path}: ${which} is ${JSON.stringify(block[1])}, not a CERTIFICATE`,
      );
    try {
      new X509Certificate(block[0]);
    } catch {
      throw new Error(`Cannot use ${option} file ${path}: ${which} is not a valid certificate`);
    }
  });
}

/**
 * Why a certificate and key pair holds the wrong kind of PEM block, or null: OpenSSL's
 * `ERR_OSSL_PEM_NO_START_LINE` does not say which file, nor that the two were given the other
 * way round (newuser12 item 15b), and Deno's `node:tls` takes such a pair without a word. Only
 * the block labels are read, never content.
 */
export function misplacedPem(cert: Uint8Array, key: Uint8Array): string | null {
  const labels = (pem: Uint8Array) =>
    [...Buffer.from(pem).toString("latin1").matchAll(pemBlock)].map((block) => block[1]);
  const isKey = (label: string) => label.endsWith("PRIVATE KEY");
  const isCert = (label: string) => label.endsWith("CERTIFICATE");
  const certLabels = labels(cert);
  const keyLabels = labels(key);
  const swapped =
    certLabels.some(isKey) && keyLabels.some(isCert)
      ? ": are --tls-cert and --tls-key swapped?"
      : "";
  if (!certLabels.some(isCert))
    return `the --tls-cert file holds no certificate${certLabels.some(isKey) ? " but a private key" : ""}${swapped}`;
  if (!keyLabels.some(isKey))
    return `the --tls-key file holds no private key${keyLabels.some(isCert) ? " but a certificate" : ""}${swapped}`;
  return null;
}

/**
 * Reads and checks the listener's PEM files.
 * @throws Error naming the file that cannot be read, or the pair that does not make a usable context (e.g. a key that does not match the certificate).
 */
export function loadTlsServerMaterial(files: TlsServerFiles): TlsServerMaterial {
  const context: tls.SecureContextOptions = {
    cert: readPem(files.certPath, "--tls-cert"),
    key: readPem(files.keyPath, "--tls-key"),
  };
  if (files.clientCaPath !== undefined) {
    context.ca = readPem(files.clientCaPath, "--tls-client-ca");
    checkCertificates(context.ca, files.clientCaPath, "--tls-client-ca");
  }
  const pair = `--tls-cert ${files.certPath} with --tls-key ${files.keyPath}${files.clientCaPath ? ` and --tls-client-ca ${files.clientCaPath}` : ""}`;
  // Before node:tls: Deno's createSecureContext takes a swapped pair without complaint.
  const misplaced = misplacedPem(context.cert as Buffer, context.key as Buffer);
  if (misplaced !== null) throw new Error(`Cannot use ${pair}: ${misplaced}`);
  try {
    tls.createSecureContext(context);
  } catch (err) {
    const code = (err as { code?: string }).code;
    throw new Error(
      `Cannot use ${pair}: ${code ?? (err instanceof Error ? err.message : String(err))}`,
    );
  }
  return {
    context,
    mutual: files.clientCaPath !== undefined,
    handshakeTimeoutMs: files.handshakeTimeoutMs ?? tlsHandshakeTimeoutMs,
    certificate: certificateOf(context.cert as Buffer, pair),
  };
}

function certificateOf(pem: Buffer, pair: string): CertificateSummary {
  try {
    return describeCertificate(pem);
  } catch (err) {
    throw new Error(`Cannot use ${pair}: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** Options of `tls.createServer` for `material` (client certificates requested and required with a client CA). */
export function tlsServerOptions(material: TlsServerMaterial): tls.TlsOptions {
  return {
    ...material.context,
    requestCert: material.mutual,
    rejectUnauthorized: material.mutual,
    handshakeTimeout: material.handshakeTimeoutMs,
  };
}

/**
 * Reports a connection refused during the TLS handshake, saying whether the peer spoke plain text
 * (HTTP or the TCP protocol without TLS: `tls.plaintext_client`) or failed the handshake (no or a
 * wrong client certificate, an unknown CA, a timeout: `tls.handshake_failed`), through `refusals`
 * (counted, at most one line a kind every few seconds) or else straight to `logger`. Never logs
 * the peer's bytes.
 * @param listener which port: "http", "tcp" or "kafka".
 */
export function logTlsClientError(
  sink: { refusals?: RefusalLog; logger?: Logger },
  listener: "http" | "tcp" | "kafka",
  error: Error,
  socket: { remoteAddress?: string; remotePort?: number } | undefined,
): void {
  const code = (error as { code?: string }).code ?? "";
  if (code === "ERR_SSL_HTTP_REQUEST" || code === "ERR_SSL_WRONG_VERSION_NUMBER")
    logPlaintextClient(sink, listener, socket);
  else refuse(sink, "tls.handshake_failed", listener, socket, code || error.message);
}

/**
 * Reports a connection that sent plain text to a TLS port (`tls.plaintext_client`), as
 * {@link logTlsClientError} does; `answered` says the client was answered in plain text first
 * (a plain-HTTP request on the HTTPS port, {@link peekBeforeTls}).
 */
export function logPlaintextClient(
  sink: { refusals?: RefusalLog; logger?: Logger },
  listener: "http" | "tcp" | "kafka",
  socket: { remoteAddress?: string; remotePort?: number } | undefined,
  answered = false,
): void {
  const port = listener === "kafka" ? "Kafka" : listener.toUpperCase();
  refuse(
    sink,
    "tls.plaintext_client",
    listener,
    socket,
    `the client sent plain text to the TLS ${port} port (connect with TLS, e.g. ${plaintextHints[listener]})${answered ? "; answered 400 in plain HTTP" : ""}`,
  );
}

function refuse(
  sink: { refusals?: RefusalLog; logger?: Logger },
  kind: "tls.plaintext_client" | "tls.handshake_failed",
  listener: "http" | "tcp" | "kafka",
  socket: { remoteAddress?: string; remotePort?: number } | undefined,
  reason: string,
): void {
  const fields = {
    listener,
    remote: `${socket?.remoteAddress ?? "?"}:${socket?.remotePort ?? "?"}`,
    reason,
  };
  if (sink.refusals !== undefined) sink.refusals.refuse(kind, fields);
  else sink.logger?.log("warn", kind, fields);
}

/** What {@link peekBeforeTls} found a connection's first bytes to be. */
export interface PeekHandlers {
  /**
   * The connection's first bytes are not a plain-HTTP request: hand it to the TLS server.
   * `remainingMs` (≥ 1) is what is left of `timeoutMs` since the connection was accepted: the
   * handshake timeout covers the wait for the first byte too.
   */
  tls(socket: net.Socket, remainingMs: number): void;
  /** The connection's first bytes (`first`) start a plain-HTTP request: answer it in plain text. */
  plainHttp(socket: net.Socket, first: Uint8Array): void;
  /**
   * The connection sent nothing for `timeoutMs`: it has been destroyed. `peer` is its address,
   * read while it was open (a destroyed socket has none).
   */
  silent(socket: net.Socket, peer: PeerAddress): void;
}

/** A connection's remote address and port, as `node:net` reports them (undefined: unknown). */
export interface PeerAddress {
  remoteAddress?: string;
  remotePort?: number;
}

/**
 * Looks at the first bytes a connection accepted for a TLS listener sends, before any handshake,
 * and hands it on: a TLS client's first record is a handshake record (content type 22, byte
 * 0x16), sent as soon as it connects, so it goes to `handlers.tls` with those bytes put back into
 * the socket (`node:tls` reads what a wrapped socket holds first), one turn of the event loop
 * after they arrived; a first byte that may start a plain-HTTP request ({@link startsPlainHttp})
 * goes to `handlers.plainHttp`; anything else to `handlers.tls` too, which refuses it as plain text. A
 * connection that sends nothing for `timeoutMs` (the handshake timeout) is destroyed and reported
 * to `handlers.silent`; `handlers.tls` gets what is left of `timeoutMs` for the handshake (a
 * client must not gain a second timeout by sending its first byte late). Costs one `data` event
 * per connection; later bytes never pass here.
 */
/**
 * True if `b`, a connection's first byte, may start a plain-HTTP request: an ASCII letter (a
 * method, also lowercase, which the HTTP parser then refuses), or CR, LF, space or tab (RFC 9112
 * §2.2 lets a request line follow empty lines; some clients send stray whitespace). A TLS record
 * starts with 0x14..0x18, an SSLv2 hello with a byte ≥ 0x80: neither is one of these.
 */
export function startsPlainHttp(b: number): boolean {
  const letter = b | 0x20; // ASCII lowercase of a letter
  return (letter >= 0x61 && letter <= 0x7a) || b === 0x0d || b === 0x0a || b === 0x20 || b === 0x09;
}

export function peekBeforeTls(socket: net.Socket, timeoutMs: number, handlers: PeekHandlers): void {
  const peer: PeerAddress = { remoteAddress: socket.remoteAddress, remotePort: socket.remotePort };
  const startMs = Date.now();
  const onData = (first: Buffer): void => {
    clearTimeout(timer);
    socket.off("data", onData);
    socket.pause();
    if (startsPlainHttp(first[0])) {
      handlers.plainHttp(socket, first);
      return;
    }
    socket.unshift(first);
    handlers.tls(socket, Math.max(1, timeoutMs - (Date.now() - startMs)));
  };
  const timer = setTimeout(() => {
    socket.off("data", onData);
    socket.destroy();
    handlers.silent(socket, peer);
  }, timeoutMs);
  // The socket's own close (peer gone, server shutting down) ends the wait; a reset before the
  // first byte is only that close (an unheard "error" would end the process).
  socket.once("close", () => clearTimeout(timer));
  socket.on("error", () => {});
  socket.on("data", onData);
}

const plaintextHints = {
  http: "https://",
  tcp: "--tls-ca",
  kafka: "security.protocol=SSL or SASL_SSL",
} as const;

/** The client side: how to check the broker's certificate, and an optional client certificate. */
export interface TlsClientFiles {
  /** CA bundle (PEM) the broker's certificate must chain to, `--tls-ca` (default: the system's CAs). */
  caPath?: string;
  /** Skip checking the broker's certificate (`--tls-insecure`): only when named explicitly. */
  insecure?: boolean;
  /** Client certificate (PEM) for mutual TLS, `--tls-cert`. */
  certPath?: string;
  /** Its key (PEM), `--tls-key`. */
  keyPath?: string;
}

/**
 * `tls.connect` options for {@link TlsClientFiles}.
 * @throws Error naming a file that cannot be read, or a certificate given without its key (or the reverse).
 */
export function tlsClientOptions(files: TlsClientFiles): tls.ConnectionOptions {
  const options: tls.ConnectionOptions = { rejectUnauthorized: files.insecure !== true };
  if (files.caPath !== undefined) options.ca = readPem(files.caPath, "--tls-ca");
  if ((files.certPath === undefined) !== (files.keyPath === undefined))
    throw new Error("Cannot use a client certificate: give both --tls-cert and --tls-key");
  if (files.certPath !== undefined) options.cert = readPem(files.certPath, "--tls-cert");
  if (files.keyPath !== undefined) options.key = readPem(files.keyPath, "--tls-key");
  return options;
}

/**
 * Reads a CA bundle that other brokers' certificates must chain to (`--cluster-tls-ca`), checked
 * block by block like the client CA: a bundle with no certificate in it would refuse every peer.
 * @throws Error naming `option` and the file (never its content).
 */
export function loadCaBundle(path: string, option: string): Buffer {
  const pem = readPem(path, option);
  checkCertificates(pem, path, option);
  return pem;
}

/** PEM files for an outgoing TLS connection of the broker's own (to etcd: `--cluster-etcd-*`). */
export interface TlsOutgoingFiles {
  /** CA bundle the server's certificate must chain to (default: the system's CAs). */
  caPath?: string;
  /** Client certificate chain, with `keyPath`. */
  certPath?: string;
  /** Its private key (PEM, unencrypted). */
  keyPath?: string;
}

/**
 * Reads and checks {@link TlsOutgoingFiles}: the CA block by block, the certificate and key by
 * building a secure context from them (a key that does not match fails here, not at the first
 * handshake). `options` names the command-line options in messages.
 * @throws Error naming the option and file that cannot be used (never their content).
 */
export function loadTlsOutgoing(
  files: TlsOutgoingFiles,
  options: { ca: string; cert: string; key: string },
): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  const material: { ca?: Buffer; cert?: Buffer; key?: Buffer } = {};
  if (files.caPath !== undefined) material.ca = loadCaBundle(files.caPath, options.ca);
  if ((files.certPath === undefined) !== (files.keyPath === undefined))
    throw new Error(
      `Cannot use a client certificate: give both ${options.cert} and ${options.key}`,
    );
  if (files.certPath !== undefined && files.keyPath !== undefined) {
    material.cert = readPem(files.certPath, options.cert);
    material.key = readPem(files.keyPath, options.key);
    try {
      tls.createSecureContext({ cert: material.cert, key: material.key });
    } catch (err) {
      const code = (err as { code?: string }).code;
      throw new Error(
        `Cannot use ${options.cert} ${files.certPath} with ${options.key} ${files.keyPath}: ${code ?? (err instanceof Error ? err.message : String(err))}`,
      );
    }
  }
  return material;
}

/** OpenSSL's certificate verification results as `node:tls` reports them (`err.code`). */
const verifyCodes = new Set([
  "UNABLE_TO_GET_ISSUER_CERT",
  "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
  "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
  "SELF_SIGNED_CERT_IN_CHAIN",
  "DEPTH_ZERO_SELF_SIGNED_CERT",
  "CERT_SIGNATURE_FAILURE",
  "CERT_NOT_YET_VALID",
  "CERT_HAS_EXPIRED",
  "CERT_REVOKED",
  "CERT_UNTRUSTED",
  "CERT_REJECTED",
  "INVALID_CA",
  "INVALID_PURPOSE",
  "HOSTNAME_MISMATCH",
  "ERR_TLS_CERT_ALTNAME_INVALID",
]);

const verifyMessage =
  /invalid peer certificate|certificate verify failed|unknown ?issuer|self[- ]signed certificate|unable to verify the first certificate|not ?valid ?for ?name|does not match certificate/i;
const handshakeMessage =
  /peer sent no certificates|certificate ?required|bad ?certificate|unknown ?ca\b|handshake failure/i;

/**
 * Says why a TLS client connection failed, if it failed in TLS: the peer's certificate was not
 * trusted or does not name the host connected to (`verify`), the peer refused this side's client
 * certificate or the handshake (`handshake`), or the peer closed the connection before the
 * handshake finished, as a plain TCP listener does (`handshake`). Null for any other failure
 * (refused, reset after the handshake, timed out). Follows `cause` links (the TCP client wraps
 * the socket's error).
 */
export function tlsFailure(err: unknown): { kind: "verify" | "handshake"; reason: string } | null {
  const chain: Error[] = [];
  for (let e = err; e instanceof Error && chain.length < 4; e = e.cause) chain.push(e);
  // Codes first (Node's OpenSSL), wherever they are in the chain; then messages: Deno's and
  // Bun's TLS report some failures by message only.
  for (const e of chain) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && verifyCodes.has(code))
      return { kind: "verify", reason: `${code}: ${e.message}` };
    if (typeof code === "string" && code.startsWith("ERR_SSL_"))
      return { kind: "handshake", reason: `${code}: ${e.message}` };
  }
  for (const e of chain) {
    if (verifyMessage.test(e.message)) return { kind: "verify", reason: e.message };
    if (handshakeMessage.test(e.message)) return { kind: "handshake", reason: e.message };
    if (/before secure TLS connection was established/i.test(e.message))
      return {
        kind: "handshake",
        reason: `${e.message} (the peer closed the connection in the TLS handshake: does its TCP listener serve plain TCP?)`,
      };
  }
  return null;
}
