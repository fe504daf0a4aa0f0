/**
 * A small HTTP fault proxy between the broker and an S3-compatible server (moto): it forwards
 * requests as they are, logs each one, and injects what real object stores and networks do —
 * error statuses (500, 503 SlowDown), a connection reset in the middle of an upload, delays, a
 * window in which every request is refused with 403, a PUT whose body is cut in half or has a
 * byte changed while the answer still says 200 (a lying store), ETags that are not the MD5 of the
 * content (an SSE-KMS bucket), listings that claim to be truncated without a continuation token,
 * and an outage (connections closed at once).
 */
import { createHash } from "node:crypto";
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from "node:http";
import type { Socket } from "node:net";

/** What a rule does to a request it matches. */
export type FaultAction =
  | { kind: "status"; status: number; code: string }
  | { kind: "reset" }
  | { kind: "delay"; ms: number }
  | { kind: "truncate_body" }
  | { kind: "corrupt_body" }
  | { kind: "truncated_listing" };

/** A fault applied to the next `times` requests that `match`. */
export interface FaultRule {
  match: (req: { method: string; path: string }) => boolean;
  times: number;
  action: FaultAction;
}

/** One request seen, with what was done to it. */
export interface ProxyLogEntry {
  method: string;
  path: string;
  status: number;
  fault: string | null;
}

/** See the module comment. */
export class FaultProxy {
  readonly endpoint: string;
  readonly log: ProxyLogEntry[] = [];
  #server: Server;
  #target: URL;
  #rules: FaultRule[] = [];
  #forbidden = false;
  #sseKms = false;
  /** ETags made up in SSE-KMS mode, to the store's: a client sends part ETags back to complete an upload. */
  #kmsEtags = new Map<string, string>();
  #down = false;
  #sockets = new Set<Socket>();

  private constructor(server: Server, target: URL, port: number) {
    this.#server = server;
    this.#target = target;
    this.endpoint = `http://127.0.0.1:${port}`;
  }

  /** Starts a proxy to `target` (`http://127.0.0.1:PORT`) on a free loopback port. */
  static async start(target: string): Promise<FaultProxy> {
    let proxy: FaultProxy | null = null;
    const server = createServer((req, res) => void proxy!.#handle(req, res));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    proxy = new FaultProxy(server, new URL(target), (server.address() as { port: number }).port);
    server.on("connection", (socket: Socket) => {
      if (proxy!.#down) {
        socket.destroy();
        return;
      }
      proxy!.#sockets.add(socket);
      socket.on("close", () => proxy!.#sockets.delete(socket));
    });
    return proxy;
  }

  /** Applies `action` to the next `times` requests that `match` (default: every request). */
  add(action: FaultAction, options: { times?: number; match?: FaultRule["match"] } = {}): void {
    this.#rules.push({ action, times: options.times ?? 1, match: options.match ?? (() => true) });
  }

  /** Removes every pending rule. */
  clear(): void {
    this.#rules = [];
  }

  /** While on, every request is refused with 403 AccessDenied. */
  forbid(on: boolean): void {
    this.#forbidden = on;
  }

  /**
   * While on, answers look like an SSE-KMS bucket's: every ETag (headers, and the XML of a
   * completed multipart upload) is replaced by 32 hex digits that are not the content's MD5, and
   * `x-amz-server-side-encryption: aws:kms` is added.
   */
  sseKms(on: boolean): void {
    this.#sseKms = on;
  }

  /** While on, connections are closed as soon as they open (an outage); open ones are cut. */
  down(on: boolean): void {
    this.#down = on;
    if (on) for (const s of this.#sockets) s.destroy();
  }

  async close(): Promise<void> {
    for (const s of this.#sockets) s.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }

  #take(method: string, path: string): FaultAction | null {
    const rule = this.#rules.find((r) => r.times > 0 && r.match({ method, path }));
    if (rule === undefined) return null;
    rule.times--;
    return rule.action;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const method = req.method ?? "GET";
    const path = req.url ?? "/";
    const entry: ProxyLogEntry = { method, path, status: 0, fault: null };
    this.log.push(entry);
    if (this.#forbidden) {
      entry.fault = "forbidden";
      req.resume();
      return this.#error(res, entry, 403, "AccessDenied", "Access Denied (fault proxy window)");
    }
    const action = this.#take(method, path);
    if (action?.kind === "reset") {
      entry.fault = "reset";
      // Cut the connection once the body starts arriving (or at once without one).
      const cut = () => req.socket.destroy();
      if (Number(req.headers["content-length"] ?? "0") > 0) req.once("data", cut);
      else cut();
      return;
    }
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    let body = Buffer.concat(chunks);
    if (action?.kind === "status") {
      entry.fault = `status ${action.status}`;
      return this.#error(res, entry, action.status, action.code, "injected by the fault proxy");
    }
    if (action?.kind === "delay") {
      entry.fault = `delay ${action.ms}`;
      await new Promise((r) => setTimeout(r, action.ms));
    }
    const headers = { ...req.headers };
    if (method === "POST" && path.includes("uploadId=") && this.#kmsEtags.size > 0) {
      body = Buffer.from(
        body.toString("utf8").replace(/<ETag>"([^"<]*)"<\/ETag>/g, (whole, e: string) => {
          const real = this.#kmsEtags.get(e);
          return real === undefined ? whole : `<ETag>"${real}"</ETag>`;
        }),
      );
      headers["content-length"] = String(body.length);
      headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD";
    }
    if (action?.kind === "truncate_body") {
      entry.fault = "truncate_body";
      body = body.subarray(0, Math.floor(body.length / 2));
      headers["content-length"] = String(body.length);
      delete headers["content-md5"];
      headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD";
    }
    if (action?.kind === "corrupt_body" && body.length > 0) {
      entry.fault = "corrupt_body";
      body = Buffer.from(body);
      body[body.length >> 1] ^= 0xff;
      delete headers["content-md5"];
      headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD";
    }
    delete headers["transfer-encoding"];
    const upstream = await new Promise<IncomingMessage>((resolve, reject) => {
      const out = httpRequest(
        {
          host: this.#target.hostname,
          port: this.#target.port,
          method,
          path,
          headers: { ...headers, host: req.headers.host },
        },
        resolve,
      );
      out.on("error", reject);
      out.end(body);
    }).catch(() => null);
    if (upstream === null) {
      entry.status = 502;
      return this.#error(res, entry, 502, "BadGateway", "the upstream did not answer");
    }
    const upChunks: Buffer[] = [];
    for await (const chunk of upstream) upChunks.push(chunk as Buffer);
    let answer = Buffer.concat(upChunks);
    const outHeaders = { ...upstream.headers };
    if (action?.kind === "truncated_listing") {
      entry.fault = "truncated_listing";
      answer = Buffer.from(
        answer
          .toString("utf8")
          .replace(/<IsTruncated>false<\/IsTruncated>/, "<IsTruncated>true</IsTruncated>")
          .replace(/<NextContinuationToken>[^<]*<\/NextContinuationToken>/, ""),
      );
      outHeaders["content-length"] = String(answer.length);
    }
    if (this.#sseKms) {
      const kms = (etag: string) => {
        const bare = etag.replace(/&quot;|"/g, "");
        const fake =
          createHash("md5").update(`kms:${bare}`).digest("hex") + (/-\d+$/.exec(bare)?.[0] ?? "");
        this.#kmsEtags.set(fake, bare);
        return fake;
      };
      const etag = outHeaders.etag;
      if (typeof etag === "string") outHeaders.etag = `"${kms(etag)}"`;
      if (method === "POST" && path.includes("uploadId=")) {
        answer = Buffer.from(
          answer
            .toString("utf8")
            .replace(
              /<ETag>([^<]*)<\/ETag>/,
              (_, e: string) => `<ETag>&quot;${kms(e)}&quot;</ETag>`,
            ),
        );
        outHeaders["content-length"] = String(answer.length);
      }
      outHeaders["x-amz-server-side-encryption"] = "aws:kms";
    }
    entry.status = upstream.statusCode ?? 0;
    res.writeHead(entry.status, outHeaders);
    res.end(answer);
  }

  #error(
    res: ServerResponse,
    entry: ProxyLogEntry,
    status: number,
    code: string,
    message: string,
  ): void {
    entry.status = status;
    const xml = `<?xml version="1.0" encoding="UTF-8"?><Error><Code>${code}</Code><Message>${message}</Message></Error>`;
    res.writeHead(status, {
      "content-type": "application/xml",
      "content-length": String(Buffer.byteLength(xml)),
    });
    res.end(xml);
  }
}
