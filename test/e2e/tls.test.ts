/**
 * End-to-end: TLS on both ports through the real process, on every runtime target
 * (docs/security.md, "TLS"), with certificate authorities made in the test by the `openssl` CLI.
 * HTTPS and TLS-TCP produce and fetch (also with an API key and through the CLI), mutual TLS, a
 * wrong CA, a certificate rotated by SIGHUP while an open connection keeps working, and plaintext
 * and TLS clients on the wrong ports closed at once with a log line.
 */
import { execFileSync } from "node:child_process";
import { copyFileSync, readFileSync, writeFileSync } from "node:fs";
import * as http from "node:http";
import * as https from "node:https";
import * as net from "node:net";
import { join } from "node:path";
import type * as tls from "node:tls";
import * as nodeTls from "node:tls";
import { afterEach, describe, expect, it, onTestFinished } from "vitest";
import { ClientError, TcpClient } from "../../src/client/client.ts";
import { tlsHandshakeTimeoutMs } from "../../src/runtime/tls.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, runCli, startBroker, target } from "./harness.ts";
import { certificateOf, makePki, type Pki } from "./pki.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** The broker with TLS from `pki` (its certificate files copied, so the test can rotate them). */
async function tlsBroker(
  pki: Pki,
  extra: string[] = [],
): Promise<{ broker: BrokerProcess; certPath: string; keyPath: string; dataDir: string }> {
  const certPath = join(pki.dir, "live.pem");
  const keyPath = join(pki.dir, "live.key");
  copyFileSync(pki.server.cert, certPath);
  copyFileSync(pki.server.key, keyPath);
  const dataDir = join(pki.dir, "data");
  const broker = await startBroker(dataDir, [
    "--tls-cert",
    certPath,
    "--tls-key",
    keyPath,
    ...extra,
  ]);
  running.push(broker);
  return { broker, certPath, keyPath, dataDir };
}

const pem = (path: string) => readFileSync(path);

/** One HTTPS request; resolves with status, body and the certificate's CN the server showed. */
function httpsRequest(
  url: string,
  options: https.RequestOptions & { body?: string },
): Promise<{ status: number; body: string; peerCn: string | undefined }> {
  return new Promise((resolve, reject) => {
    const req = https.request(url, options, (res) => {
      const peer = (res.socket as tls.TLSSocket).getPeerCertificate?.();
      let body = "";
      res.on("data", (d) => (body += d));
      res.on("end", () =>
        resolve({
          status: res.statusCode ?? 0,
          body,
          peerCn: peer?.subject?.CN as string | undefined,
        }),
      );
    });
    req.on("error", reject);
    req.setTimeout(10_000, () => req.destroy(new Error("no answer")));
    req.end(options.body);
  });
}

/** Connects to `port`, writes `bytes`, waits until the server closes; resolves with the client's own port. */
function closedFrom(port: number, bytes: Uint8Array, limitMs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port }, () => {
      if (bytes.length > 0) socket.write(bytes);
    });
    let localPort = 0;
    socket.on("connect", () => (localPort = socket.localPort ?? 0));
    socket.on("data", () => {});
    socket.on("error", () => {});
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`[${target}] the server kept a connection open ${limitMs} ms`));
    }, limitMs);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(localPort);
    });
  });
}

/**
 * Resolves once the server closes a connection that sent `bytes`; rejects if it stays open
 * `limitMs` (default 5 s).
 */
function closedAfter(port: number, bytes: Uint8Array | string, limitMs = 5000): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = Date.now();
    const socket = net.connect({ host: "127.0.0.1", port }, () => {
      if (bytes.length > 0) socket.write(bytes);
    });
    socket.on("data", () => {});
    socket.on("error", () => {});
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`[${target}] the server kept a connection open ${limitMs} ms`));
    }, limitMs);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(Date.now() - started);
    });
  });
}

/** Sends `bytes` on a plain connection and resolves with everything received until the close. */
function plainExchange(port: number, bytes: string, limitMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port }, () => socket.write(bytes));
    let received = "";
    socket.setEncoding("latin1");
    socket.on("data", (d: string) => (received += d));
    socket.on("error", () => {});
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`[${target}] the server kept a connection open ${limitMs} ms`));
    }, limitMs);
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(received);
    });
  });
}

/** A plain `http://` request through `node:http` (as curl sends one), with a body of `bodyBytes`. */
function plainHttpRequest(
  port: number,
  bodyBytes: number,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: "127.0.0.1", port, path: "/v1/topics/t/records", method: "POST", agent: false },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
      },
    );
    req.on("error", reject);
    req.setHeader("content-type", "application/x-ndjson");
    req.end(Buffer.alloc(bodyBytes, 0x61));
  });
}

/**
 * `es-broker topics list --broker address`, trusting the CA file `ca` (`--tls-ca`) and presenting
 * `client`'s certificate and key (`--tls-cert`, `--tls-key`) if given.
 */
function topicsList(address: string, ca: string, client?: { cert: string; key: string }) {
  const certificate =
    client === undefined ? [] : ["--tls-cert", client.cert, "--tls-key", client.key];
  return runCli(["topics", "list", "--broker", address, "--tls-ca", ca, ...certificate]);
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e as Error,
  );
  expect(error).toBeInstanceOf(Error);
  return error!;
}

describe(`[${target}] TLS end to end`, () => {
  it("serves HTTPS and TLS-TCP; a client trusting another CA is refused; plaintext on a TLS port is closed and logged", async () => {
    const pki = makePki();
    const { broker } = await tlsBroker(pki, ["--metrics-port", "0"]);
    expect(broker.httpUrl).toMatch(/^https:\/\//);
    // The plain metrics port answers next to the HTTPS one (on Deno two kinds of HTTP server
    // share the process: Deno.serve must still get its own Response objects).
    const metrics = await fetch(broker.metricsUrl!);
    expect(metrics.status).toBe(200);
    expect(await metrics.text()).toContain("esb_build_info");
    const client = await TcpClient.connect({ ...broker.tcp, tls: { ca: pem(pki.ca) } });
    onTestFinished(() => client.close());
    await client.createTopic({ name: "t", partitions: 1 });
    await client.produce("t", [{ value: "over tls-tcp" }]);
    const produced = await httpsRequest(`${broker.httpUrl}/v1/topics/t/records`, {
      method: "POST",
      ca: pem(pki.ca),
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ records: [{ value: "over https" }] }),
    });
    expect(produced.status, produced.body).toBe(200);
    expect(produced.peerCn).toBe("server-one");
    const fetched = await httpsRequest(
      `${broker.httpUrl}/v1/topics/t/partitions/0/records?offset=0`,
      { ca: pem(pki.ca) },
    );
    expect(JSON.parse(fetched.body).records.map((r: { value: string }) => r.value)).toEqual([
      "over tls-tcp",
      "over https",
    ]);
    const overTcp = await client.fetch({ topic: "t", partition: 0, offset: 0 });
    expect(overTcp.records.map((r) => new TextDecoder().decode(r.value))).toEqual([
      "over tls-tcp",
      "over https",
    ]);

    // A client that trusts another CA refuses the broker.
    const wrongCa = await failure(
      TcpClient.connect({ ...broker.tcp, tls: { ca: pem(pki.otherCa) } }),
    );
    expect(wrongCa).toBeInstanceOf(ClientError);
    expect(wrongCa.message).toMatch(/certificate/i);
    expect(
      (await failure(httpsRequest(`${broker.httpUrl}/healthz`, { ca: pem(pki.otherCa) }))).message,
    ).toMatch(/certificate/i);

    // Plain text on the TLS ports: closed at once, and the broker says why (a kind of refusal is
    // logged at once, then at most every 5 s with a count: the second line may wait that long).
    const httpPort = Number(new URL(broker.httpUrl).port);
    expect(await closedAfter(httpPort, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")).toBeLessThan(
      5000,
    );
    expect(
      await closedAfter(broker.tcp.port, new Uint8Array([0, 0, 0, 8, 0, 3, 0, 0, 0, 0, 0, 1])),
    ).toBeLessThan(5000);
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.plaintext_client","listener":"http"/);
    const plainClient = await failure(
      TcpClient.connect({ ...broker.tcp, timeoutMs: 5000 }).then((c) =>
        c.metadata().finally(() => c.close()),
      ),
    );
    expect(plainClient).toBeInstanceOf(ClientError);
    expect(plainClient.message).toMatch(/closes plain connections: connect with TLS/);

    // The CLI with --tls-ca.
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    const cliProduce = await runCli(
      ["produce", "t", "--broker", address, "--tls-ca", pki.ca],
      Buffer.from("from the cli\n"),
    );
    expect(cliProduce.code, cliProduce.stderr).toBe(0);
    const cliConsume = await runCli([
      "consume",
      "t",
      "--from-beginning",
      "--broker",
      address,
      "--tls-ca",
      pki.ca,
    ]);
    expect(cliConsume.code, cliConsume.stderr).toBe(0);
    expect(cliConsume.stdout.toString()).toBe("over tls-tcp\nover https\nfrom the cli\n");
    const cliWrongCa = await topicsList(address, pki.otherCa);
    expect(cliWrongCa.code).toBe(1);
    // The CLI without TLS options on a TLS port: told which options it lacks.
    const cliPlain = await runCli(["topics", "list", "--broker", address]);
    expect(cliPlain.code).toBe(1);
    expect(cliPlain.stderr).toMatch(
      /\nes-broker: if the broker serves TLS, connect with TLS: --tls-ca FILE \(the broker's CA\) or --tls \(the system's CAs\); if it is at its --max-connections bound, its log says so\n$/,
    );
    // The TCP port's plaintext line (the kind's second, so up to 5 s late), awaited only now so
    // the CLI runs above overlap the wait.
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.plaintext_client","listener":"tcp"/);
    const cliInsecure = await runCli(["topics", "list", "--broker", address, "--tls-insecure"]);
    expect(cliInsecure.code, cliInsecure.stderr).toBe(0);
    expect(cliInsecure.stdout.toString()).toBe("t\n");
  });

  it("a plain-HTTP request on the HTTPS port is answered 400 naming https://, then closed; TLS clients are served as before", async () => {
    const pki = makePki();
    const { broker } = await tlsBroker(pki);
    const httpPort = Number(new URL(broker.httpUrl).port);
    const message = `Cannot serve a plain HTTP request: this port speaks HTTPS (TLS): use https://127.0.0.1:${httpPort}/`;
    const answer = await plainExchange(
      httpPort,
      `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${httpPort}\r\nUser-Agent: curl/8\r\n\r\n`,
    );
    const served = () =>
      Promise.all(
        Array.from({ length: 5 }, () =>
          httpsRequest(`${broker.httpUrl}/healthz`, { ca: pem(pki.ca), agent: false }),
        ),
      );
    if (target === "deno") {
      // Deno's `node:https` closes a connection handed to it after its first answer (a keep-alive
      // client's next request met a reset), so on Deno the TLS server accepts connections itself
      // and nothing peeks before it (src/runtime/http.ts): plain HTTP gets Deno's TLS alert, no
      // HTTP answer, and the close, as before; the CLI still names https://.
      expect(answer.startsWith("HTTP/"), answer).toBe(false);
      await expect
        .poll(() => broker.stderr(), { timeout: 10_000 })
        .toMatch(/"event":"tls.plaintext_client","listener":"http"/);
      for (const r of await served()) expect(r.status).toBe(200);
      const keysPlain = await runCli(["keys", "list", "--url", `http://127.0.0.1:${httpPort}`]);
      expect(keysPlain.code).toBe(1);
      expect(keysPlain.stderr).toMatch(
        /\(if the broker serves HTTPS, give an https:\/\/ --url\)\n$/,
      );
      return;
    }
    const [head, body] = answer.split("\r\n\r\n");
    expect(head.split("\r\n")[0], answer).toBe("HTTP/1.1 400 Bad Request");
    expect(head.toLowerCase()).toContain("\r\nconnection: close");
    expect(head.toLowerCase()).toContain("\r\ncontent-type: application/json");
    expect(JSON.parse(body)).toEqual({ error: { code: "invalid_request", message } });
    // Without a Host it can quote, the answer names https:// alone.
    const hostless = await plainExchange(httpPort, "GET / HTTP/1.0\r\n\r\n");
    expect(hostless).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    expect(hostless).toContain("this port speaks HTTPS (TLS): use an https:// URL");
    // A lowercase method, empty lines before the request line (RFC 9112 §2.2), a leading space:
    // plain HTTP too, answered the same (attack12 F7).
    for (const start of ["get", "\r\nGET", "\nGET", " GET"]) {
      const odd = await plainExchange(
        httpPort,
        `${start} /healthz HTTP/1.1\r\nHost: 127.0.0.1:${httpPort}\r\n\r\n`,
      );
      expect(odd, JSON.stringify(start)).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
      expect(odd).toContain(message);
    }
    // A client still sending a body (1 MiB) reads the answer: it is not lost to a reset.
    const posted = await plainHttpRequest(httpPort, 1024 * 1024);
    expect(posted.status).toBe(400);
    expect(JSON.parse(posted.body).error.message).toBe(message);
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.plaintext_client","listener":"http".*answered 400 in plain HTTP/);
    // TLS clients after it: served, their first bytes put back for the handshake.
    for (const r of await served()) expect(r.status).toBe(200);
    // The CLI pointed at http:// shows the answer's reason.
    const keysPlain = await runCli(["keys", "list", "--url", `http://127.0.0.1:${httpPort}`]);
    expect(keysPlain.code).toBe(1);
    expect(keysPlain.stderr).toContain(`invalid_request: ${message}`);
  });

  it("answers a long HTTPS pipeline in full when it arrives in many small TLS records", async () => {
    const pki = makePki();
    const { broker } = await tlsBroker(pki);
    const httpPort = Number(new URL(broker.httpUrl).port);
    const requests = 400;
    const pipeline = Buffer.from(
      "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n".repeat(requests),
      "latin1",
    );
    // Node pauses its parser once ~16 KiB of answers wait to be written; the TLS records already
    // decrypted from the same read then met the paused parser and the request was answered
    // `400 HPE_PAUSED` (attack12 F4). Many small records per read make that happen every run.
    const received = await new Promise<string>((resolve, reject) => {
      const socket = nodeTls.connect({
        host: "127.0.0.1",
        port: httpPort,
        servername: "localhost",
        ca: pem(pki.ca),
      });
      let text = "";
      const answers = () => text.split("HTTP/1.1 ").length - 1;
      socket.setEncoding("latin1");
      socket.on("secureConnect", () => {
        let seed = 7;
        for (let at = 0; at < pipeline.length; ) {
          seed = (seed * 1103515245 + 12345) % 2147483648;
          const end = Math.min(pipeline.length, at + 1 + (seed % 64));
          socket.write(pipeline.subarray(at, end));
          at = end;
        }
      });
      socket.on("data", (d: string) => {
        text += d;
        if (answers() >= requests) {
          socket.destroy();
          resolve(text);
        }
      });
      socket.on("error", reject);
      socket.on("close", () => resolve(text));
      setTimeout(() => {
        socket.destroy();
        resolve(text);
      }, 20_000);
    });
    const statuses = received
      .split("HTTP/1.1 ")
      .slice(1)
      .map((a) => a.slice(0, 3));
    const refused = received.match(/"error":\{[^}]*\}/)?.[0];
    expect(statuses.length, refused).toBe(requests);
    expect(new Set(statuses), refused).toEqual(new Set(["200"]));
  }, 40_000);

  it("mutual TLS: a client certificate from the client CA is accepted; none, or one from another CA, is refused on both ports", async () => {
    const pki = makePki();
    const { broker, dataDir } = await tlsBroker(pki, ["--tls-client-ca", pki.ca]);
    const good = { ca: pem(pki.ca), cert: pem(pki.client.cert), key: pem(pki.client.key) };
    const client = await TcpClient.connect({ ...broker.tcp, tls: good });
    onTestFinished(() => client.close());
    await client.createTopic({ name: "t", partitions: 1 });
    expect((await httpsRequest(`${broker.httpUrl}/v1/topics`, good)).status).toBe(200);
    for (const bad of [
      { ca: pem(pki.ca) },
      { ca: pem(pki.ca), cert: pem(pki.otherClient.cert), key: pem(pki.otherClient.key) },
    ]) {
      // TLS 1.3 finishes the client's side first: the refusal comes with the first read.
      const refused = await failure(
        TcpClient.connect({ ...broker.tcp, tls: bad, timeoutMs: 5000 }).then((c) =>
          c.metadata().finally(() => c.close()),
        ),
      );
      expect(refused).toBeInstanceOf(ClientError);
      await failure(httpsRequest(`${broker.httpUrl}/v1/topics`, { ...bad, agent: false }));
    }
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.handshake_failed","listener":"tcp"/);
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.handshake_failed","listener":"http"/);
    // Keys still decide what a client with a good certificate may do.
    await broker.stop("SIGTERM");
    const made = await runCli([
      "keys",
      "create",
      "--data-dir",
      dataDir,
      "--name",
      "root",
      "--role",
      "admin",
    ]);
    expect(made.code, made.stderr).toBe(0);
    const key = made.stdout.toString().trim();
    const again = await startBroker(dataDir, [
      "--tls-cert",
      join(pki.dir, "live.pem"),
      "--tls-key",
      join(pki.dir, "live.key"),
      "--tls-client-ca",
      pki.ca,
    ]);
    running.push(again);
    expect(
      (
        await failure(
          TcpClient.connect({ ...again.tcp, tls: good }).then((c) =>
            c.metadata().finally(() => c.close()),
          ),
        )
      ).message,
    ).toMatch(/API key is required/);
    const authed = await TcpClient.connect({ ...again.tcp, tls: good, apiKey: key });
    onTestFinished(() => authed.close());
    expect((await authed.metadata()).map((t) => t.name)).toEqual(["t"]);
    expect(
      (
        await httpsRequest(`${again.httpUrl}/v1/topics`, {
          ...good,
          headers: { authorization: `Bearer ${key}` },
        })
      ).status,
    ).toBe(200);
    expect((await httpsRequest(`${again.httpUrl}/v1/topics`, good)).status).toBe(401);
    expect(again.stderr()).not.toContain(key);
  });

  // The mutual-TLS refusal reads one of two ways: Node's and Bun's TLS servers send the
  // certificate_required alert; Deno's sometimes closes the connection before it arrives. Either
  // way the CLI names --tls-cert/--tls-key (the second way next test, deterministically).
  it("the CLI says which option fixes a TLS refusal: --tls-ca for an untrusted CA, --tls-cert/--tls-key for mutual TLS", async () => {
    const pki = makePki();
    const { broker } = await tlsBroker(pki, ["--tls-client-ca", pki.ca]);
    const address = `${broker.tcp.host}:${broker.tcp.port}`;
    const untrusted = await runCli(["topics", "list", "--broker", address, "--tls"]);
    expect(untrusted.code).toBe(1);
    expect(untrusted.stderr).toContain(
      "es-broker: the broker's certificate is not signed by a CA this command trusts: name its CA with --tls-ca FILE\n",
    );
    const noCertificate = await topicsList(address, pki.ca);
    expect(noCertificate.code).toBe(1);
    const alerted =
      "es-broker: the broker requires a client certificate (mutual TLS): add --tls-cert FILE --tls-key FILE (a certificate its --tls-client-ca signed)\n";
    const closed =
      "es-broker: the broker closed the TLS connection and this command sent no client certificate: if it requires one (mutual TLS), add --tls-cert FILE --tls-key FILE (a certificate its --tls-client-ca signed); otherwise its log says why it closed the connection\n";
    expect(
      [alerted, closed].some((hint) => noCertificate.stderr.includes(hint)),
      noCertificate.stderr,
    ).toBe(true);
    if (target !== "deno") expect(noCertificate.stderr).toContain(alerted);
    // OpenSSL's raw error line ("80EC…:error:0A00045C:SSL routines:…") is not shown.
    expect(noCertificate.stderr).not.toMatch(/:error:[0-9A-F]+:SSL routines:/);
    // A certificate the broker refuses (another CA's): the CLI says the broker refused it.
    const refused = await topicsList(address, pki.ca, pki.otherClient);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(
      /the broker may have refused this client's certificate|the broker sent TLS alert "[a-z ]+"/,
    );
    expect(refused.stderr).not.toMatch(/:error:[0-9A-F]+:SSL routines:/);
    const withCertificate = await topicsList(address, pki.ca, pki.client);
    expect(withCertificate.code, withCertificate.stderr).toBe(0);
  });

  it("a TLS connection the server closes without a reason, no client certificate sent: the CLI names both possibilities", async () => {
    const pki = makePki();
    // A TLS server that completes the handshake and closes every connection at once, no alert
    // (as Deno's does to a client without a certificate, sometimes before its alert).
    const server = nodeTls.createServer(
      { cert: pem(pki.server.cert), key: pem(pki.server.key) },
      (socket) => socket.destroy(),
    );
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const address = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
    const closed = await topicsList(address, pki.ca);
    expect(closed.code).toBe(1);
    expect(closed.stderr).toContain("and this client sent no certificate");
    expect(closed.stderr).toContain(
      "es-broker: the broker closed the TLS connection and this command sent no client certificate: if it requires one (mutual TLS), add --tls-cert FILE --tls-key FILE (a certificate its --tls-client-ca signed); otherwise its log says why it closed the connection\n",
    );
    // With a certificate sent, the same close says the certificate may have been refused, and
    // names no certificate option to add.
    const withCertificate = await topicsList(address, pki.ca, pki.client);
    expect(withCertificate.code).toBe(1);
    expect(withCertificate.stderr).toMatch(/connection_closed: .*closed/);
    expect(withCertificate.stderr).not.toContain("--tls-cert");
    expect(withCertificate.stderr).toContain(
      "the broker may have refused this client's certificate",
    );
  });

  it("SIGHUP serves a rotated certificate to new connections while open connections keep working", async () => {
    const pki = makePki();
    const { broker, certPath, keyPath } = await tlsBroker(pki, ["--metrics-port", "0"]);
    // newuser18 F7: each listener's certificate expiry and the reload outcome are metrics, and
    // tls.reloaded names the new certificate.
    const notAfter = (file: string) =>
      Date.parse(
        execFileSync("openssl", ["x509", "-in", file, "-noout", "-enddate"], { encoding: "utf8" })
          .trim()
          .replace(/^notAfter=/, ""),
      ) / 1000;
    const sample = async (series: string) => {
      const text = await (await fetch(broker.metricsUrl!)).text();
      const line = text.split("\n").find((l) => l.startsWith(`${series} `));
      return line === undefined ? undefined : Number(line.slice(series.length + 1));
    };
    const expiry = (listener: string) =>
      sample(`esb_tls_certificate_expiry_timestamp_seconds{listener="${listener}"}`);
    expect(await expiry("http")).toBe(notAfter(pki.server.cert));
    expect(await expiry("tcp")).toBe(notAfter(pki.server.cert));
    expect(await sample('esb_tls_last_reload_successful{material="listeners"}')).toBe(1);
    expect(await sample('esb_tls_reload_failures_total{material="listeners"}')).toBe(0);
    const httpPort = Number(new URL(broker.httpUrl).port);
    const open = await TcpClient.connect({ ...broker.tcp, tls: { ca: pem(pki.ca) } });
    onTestFinished(() => open.close());
    await open.createTopic({ name: "t", partitions: 1 });
    const agent = new https.Agent({ keepAlive: true, maxSockets: 1, ca: pem(pki.ca) });
    onTestFinished(() => agent.destroy());
    expect((await httpsRequest(`${broker.httpUrl}/healthz`, { agent })).peerCn).toBe("server-one");
    expect(await certificateOf(broker.tcp.port, pki.ca)).toBe("server-one");

    copyFileSync(pki.rotated.cert, certPath);
    copyFileSync(pki.rotated.key, keyPath);
    broker.proc.kill("SIGHUP");
    await expect.poll(() => broker.stderr(), { timeout: 10_000 }).toMatch(/"event":"tls.reloaded"/);
    const reloaded = JSON.parse(
      broker
        .stderr()
        .split("\n")
        .find((l) => l.includes('"event":"tls.reloaded"'))!,
    );
    expect(reloaded.subject).toBe("CN=server-two");
    expect(Date.parse(reloaded.not_after) / 1000).toBe(notAfter(pki.rotated.cert));
    expect(await expiry("tcp")).toBe(notAfter(pki.rotated.cert));

    expect(await certificateOf(broker.tcp.port, pki.ca)).toBe("server-two");
    expect(await certificateOf(httpPort, pki.ca)).toBe("server-two");
    // The connections opened before the rotation still work, with the certificate they started with.
    await open.produce("t", [{ value: "after rotation" }]);
    expect((await open.fetch({ topic: "t", partition: 0, offset: 0 })).recordCount).toBe(1);
    const old = await httpsRequest(`${broker.httpUrl}/v1/topics/t/partitions/0/records?offset=0`, {
      agent,
    });
    expect(old.status).toBe(200);
    expect(old.peerCn).toBe("server-one");

    // A broken certificate file on SIGHUP keeps the one in force.
    writeFileSync(certPath, "not a certificate");
    broker.proc.kill("SIGHUP");
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.reload_failed"/);
    expect(await certificateOf(broker.tcp.port, pki.ca)).toBe("server-two");
    // A failed reload is a metric, not only a log line (`kill -HUP` exits 0 either way); the
    // expiry stays the one of the certificate still in force.
    expect(await sample('esb_tls_last_reload_successful{material="listeners"}')).toBe(0);
    expect(await sample('esb_tls_reload_failures_total{material="listeners"}')).toBe(1);
    expect(await expiry("http")).toBe(notAfter(pki.rotated.cert));
  });

  it("a client CA file without a usable certificate refuses the start, and on SIGHUP keeps the CA in force", async () => {
    const pki = makePki();
    // A private key, or a PEM block that is not a certificate, given as the client CA.
    const bogus = join(pki.dir, "bogus-ca.pem");
    writeFileSync(bogus, "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n");
    for (const file of [pki.client.key, bogus]) {
      const refused = await startBroker(join(pki.dir, "refused"), [
        "--tls-cert",
        pki.server.cert,
        "--tls-key",
        pki.server.key,
        "--tls-client-ca",
        file,
      ]).then(
        (started) => {
          running.push(started);
          return null;
        },
        (error: Error) => error,
      );
      expect(refused?.message).toMatch(/exited \(1\) before listening/);
      expect(refused?.message).toContain(file);
      // Named, never shown: no line of the file's content is in the message.
      const content = readFileSync(file, "utf8").split("\n")[1];
      expect(refused?.message).not.toContain(content);
    }
    const liveCa = join(pki.dir, "live-ca.pem");
    copyFileSync(pki.ca, liveCa);
    const { broker } = await tlsBroker(pki, ["--tls-client-ca", liveCa]);
    const good = { ca: pem(pki.ca), cert: pem(pki.client.cert), key: pem(pki.client.key) };
    expect(
      (await httpsRequest(`${broker.httpUrl}/healthz`, { ...good, agent: false })).status,
    ).toBe(200);
    copyFileSync(bogus, liveCa);
    broker.proc.kill("SIGHUP");
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.reload_failed".*live-ca\.pem/);
    expect(broker.stderr()).not.toMatch(/"event":"tls.reloaded"/);
    expect(
      (await httpsRequest(`${broker.httpUrl}/healthz`, { ...good, agent: false })).status,
    ).toBe(200);
    const client = await TcpClient.connect({ ...broker.tcp, tls: good });
    onTestFinished(() => client.close());
    expect(await client.metadata()).toEqual([]);
  });

  it("a client that never finishes its TLS handshake is closed after the handshake timeout, on both ports", async () => {
    const pki = makePki();
    // --tls-handshake-timeout-ms (default 10 s, docs/security.md), short here so the test waits
    // 1.5 s, not 10: the connection must not outlive it, nor be closed much before it.
    const timeoutMs = 1500;
    const { broker } = await tlsBroker(pki, ["--tls-handshake-timeout-ms", String(timeoutMs)]);
    const httpPort = Number(new URL(broker.httpUrl).port);
    // The start of a ClientHello (record header, handshake type, a length it never sends in full).
    const partialHello = new Uint8Array([0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4]);
    const limitMs = timeoutMs + 5000;
    const closed = await Promise.all([
      closedAfter(broker.tcp.port, "", limitMs),
      closedAfter(broker.tcp.port, partialHello, limitMs),
      closedAfter(httpPort, "", limitMs),
      closedAfter(httpPort, partialHello, limitMs),
    ]);
    for (const ms of closed) expect(ms).toBeGreaterThanOrEqual(timeoutMs - 500);
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tls.handshake_failed".*(ERR_TLS_HANDSHAKE_TIMEOUT|TLS handshake timeout)/);
    expect(tlsHandshakeTimeoutMs).toBe(10_000);
  }, 40_000);

  it("the handshake timeout on the HTTPS port counts from the connection, not from its first byte", async () => {
    const pki = makePki();
    const timeoutMs = 2000;
    const { broker } = await tlsBroker(pki, ["--tls-handshake-timeout-ms", String(timeoutMs)]);
    const httpPort = Number(new URL(broker.httpUrl).port);
    const hello = [0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4, 0x03, 0x03];
    // Silent until just before the timeout, then a ClientHello a byte every 100 ms: closed at
    // the timeout, not a whole timeout after the first byte (attack report F6).
    const closedMs = await new Promise<number>((resolve, reject) => {
      const started = Date.now();
      const socket = net.connect({ host: "127.0.0.1", port: httpPort });
      let sent = 0;
      let ticker: ReturnType<typeof setInterval> | undefined;
      const first = setTimeout(() => {
        ticker = setInterval(() => {
          if (!socket.destroyed) socket.write(Uint8Array.of(hello[sent++ % hello.length]));
        }, 100);
      }, timeoutMs - 300);
      socket.on("data", () => {});
      socket.on("error", () => {});
      const limit = setTimeout(() => {
        socket.destroy();
        reject(new Error(`[${target}] the server kept the connection open ${3 * timeoutMs} ms`));
      }, 3 * timeoutMs);
      socket.on("close", () => {
        clearTimeout(first);
        clearInterval(ticker);
        clearTimeout(limit);
        resolve(Date.now() - started);
      });
    });
    expect(closedMs).toBeGreaterThanOrEqual(timeoutMs - 500);
    expect(closedMs).toBeLessThan(timeoutMs + 800);
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(
        // Deno's HTTPS server accepts its connections itself (docs/security.md): its timeout
        // line has its own reason, and its sockets report no peer address there.
        target === "deno"
          ? /"event":"tls.handshake_failed","listener":"http","remote":"[^"]+","reason":"TLS handshake timeout"/
          : /"event":"tls.handshake_failed","listener":"http","remote":"127\.0\.0\.1:\d+","reason":"ERR_TLS_HANDSHAKE_TIMEOUT"/,
      );
  }, 40_000);

  it("logs the client's address for a handshake that fails on the HTTPS port, silent or cut short", async () => {
    const pki = makePki();
    const timeoutMs = 1000;
    const { broker } = await tlsBroker(pki, ["--tls-handshake-timeout-ms", String(timeoutMs)]);
    const httpPort = Number(new URL(broker.httpUrl).port);
    const partialHello = new Uint8Array([0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4]);
    const failures = () =>
      broker
        .stderr()
        .split("\n")
        .filter(
          (l) => l.includes('"event":"tls.handshake_failed"') && l.includes('"listener":"http"'),
        )
        .map((l) => JSON.parse(l) as { remote: string; refused: number });
    // Nothing sent (peekBeforeTls' own timeout), then the start of a ClientHello (the TLS
    // server's): the second line is the refusal log's summary, with the latest refusal's fields.
    for (const [n, bytes] of [new Uint8Array(0), partialHello].entries()) {
      const port = await closedFrom(httpPort, bytes, timeoutMs + 5000);
      await expect.poll(() => failures().length, { timeout: 10_000 }).toBeGreaterThan(n);
      // On Deno the HTTPS server accepts its connections itself and its TLS sockets report no
      // peer address (docs/security.md): the failure is logged, without the address.
      expect(failures()[n].remote, broker.stderr()).toBe(
        target === "deno" ? "?:?" : `127.0.0.1:${port}`,
      );
    }
  }, 40_000);

  it("logs the client's address for a handshake that fails on the TCP port, reset mid-handshake or refused by the client (newuser17 #10)", async () => {
    const pki = makePki();
    const timeoutMs = 3000;
    const { broker } = await tlsBroker(pki, ["--tls-handshake-timeout-ms", String(timeoutMs)]);
    const failures = () =>
      broker
        .stderr()
        .split("\n")
        .filter(
          (l) => l.includes('"event":"tls.handshake_failed"') && l.includes('"listener":"tcp"'),
        )
        .map((l) => JSON.parse(l) as { remote: string });
    // The start of a ClientHello, then the client goes away (reset): the TLS socket has no
    // address of its own any more when the failure is reported. The reset comes half the
    // handshake timeout later, so a loaded broker has accepted the connection by then (one reset
    // before the accept leaves no address to read on any runtime).
    const partialHello = new Uint8Array([0x16, 0x03, 0x01, 0x00, 0xc8, 0x01, 0x00, 0x00, 0xc4]);
    const cutShort = await new Promise<number>((resolve) => {
      const socket = net.connect(broker.tcp, () => {
        socket.write(partialHello);
        setTimeout(() => socket.resetAndDestroy(), timeoutMs / 2);
      });
      let localPort = 0;
      socket.on("connect", () => (localPort = socket.localPort ?? 0));
      socket.on("error", () => {});
      socket.on("close", () => resolve(localPort));
    });
    await expect.poll(() => failures().length, { timeout: 10_000 }).toBeGreaterThan(0);
    expect(failures()[0].remote, broker.stderr()).toBe(`127.0.0.1:${cutShort}`);
    // A client that does not trust the certificate (a mirror with the wrong CA): it resets.
    const refusing = await new Promise<number>((resolve) => {
      const socket = nodeTls.connect({ ...broker.tcp, ca: readFileSync(pki.otherCa) });
      let localPort = 0;
      socket.on("connect", () => (localPort = socket.localPort ?? 0));
      socket.on("error", () => {});
      socket.on("close", () => resolve(localPort));
    });
    await expect.poll(() => failures().length, { timeout: 10_000 }).toBeGreaterThan(1);
    expect(failures()[1].remote, broker.stderr()).toBe(`127.0.0.1:${refusing}`);
  }, 40_000);

  it("a TLS client on a plain port is answered in plain text and closed, logged; the CLI names the plain port", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(join(dir, "data"));
    running.push(broker);
    const tcpRefused = await failure(
      TcpClient.connect({ ...broker.tcp, tls: { rejectUnauthorized: false }, timeoutMs: 5000 }),
    );
    expect(tcpRefused).toBeInstanceOf(ClientError);
    await expect
      .poll(() => broker.stderr(), { timeout: 10_000 })
      .toMatch(/"event":"tcp.frame_refused".*the peer speaks TLS but this port is plain TCP/);
    // The broker answers the handshake in plain text, so the CLI can name the likely cause.
    const pki = makePki();
    const cli = await topicsList(`${broker.tcp.host}:${broker.tcp.port}`, pki.ca);
    expect(cli.code, cli.stderr).toBe(1);
    expect(cli.stderr).toContain(
      "\nes-broker: the broker answered without TLS: the port is likely plain TCP: drop --tls-ca/--tls (or start the broker with --tls-cert FILE --tls-key FILE)\n",
    );
    const httpPort = Number(new URL(broker.httpUrl).port);
    const started = Date.now();
    await failure(
      httpsRequest(`https://127.0.0.1:${httpPort}/healthz`, { rejectUnauthorized: false }),
    );
    expect(Date.now() - started).toBeLessThan(5000);
    // Node's HTTP server reports it; Deno.serve and Bun.serve close such a connection without a hook to log it.
    if (target === "node")
      await expect
        .poll(() => broker.stderr(), { timeout: 10_000 })
        .toMatch(/"event":"http.tls_on_plain_port"/);
  });
});
