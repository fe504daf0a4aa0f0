/**
 * A {@link ColdStore} on S3-compatible object storage (`--cold-storage s3://bucket/prefix`,
 * docs/storage.md "Cold tier"), over `fetch` with requests signed by `aws4fetch` (SigV4; ≈ 8 KB
 * bundled, works on Node, Deno, Bun and the compiled binary — the AWS SDK's S3 client bundles to
 * ≈ 590 KB and adds ≈ 40 ms to start-up).
 *
 * Requests (path-style `ENDPOINT/bucket/key` with an explicit endpoint, virtual-hosted on AWS):
 *
 * | operation | requests                                                                    |
 * |-----------|-----------------------------------------------------------------------------|
 * | put ≤ multipart threshold | PUT with Content-MD5 and a signed SHA-256 of the body; HEAD (ranged GETs when the ETag cannot prove the content) |
 * | put > threshold | CreateMultipartUpload; UploadPart × n (each with Content-MD5, at most `concurrency` at once); CompleteMultipartUpload; HEAD, GETs as above (AbortMultipartUpload on failure) |
 * | get       | GET with `Range: bytes=a-b`; the answer's length is checked                 |
 * | list      | ListObjectsV2, every page (a truncated page without a continuation token is an error) |
 * | delete    | DELETE (404 is success)                                                     |
 * | abortStaleUploads | ListMultipartUploads under the prefix (every page); AbortMultipartUpload of each of ours not in progress |
 *
 * Verification after a put: the HEAD must report the size sent, and then either an ETag equal to
 * the MD5 the broker computed (for a multipart upload, the MD5 of the parts' MD5s and `-n`: the
 * store hashed what it kept), or — when the ETag is anything else: SSE-KMS or SSE-C objects, stores
 * whose ETags are not MD5s, a wrong MD5 — the object is read back (ranged GETs of at most 8 MiB)
 * and each part's MD5 compared with the MD5 of the bytes sent. S3's additional checksums
 * (`x-amz-checksum-sha256`, read back with `x-amz-checksum-mode: ENABLED`) are not used as proof:
 * a store may keep the checksum the client claimed without checking the body against it (moto
 * does; chimera#474, rustfs#4341), so it proves nothing about the bytes. A mismatch — a store that
 * acknowledged a short or corrupt body — re-uploads, up to `attempts`. The read-back costs one GET
 * of the whole object per put (on AWS: request and, outside the region, transfer charges), paid
 * only where the ETag cannot prove the content (logged once: `cold.s3_read_back_verification`).
 *
 * Retries: every request is retried with exponential backoff and jitter on connection errors and
 * resets, timeouts (`requestTimeoutMs`), 5xx, 429 and S3's `SlowDown`/`RequestTimeout`, up to
 * `attempts` tries; then it fails as `unavailable`. 403 fails at once as `access_denied` and a
 * missing bucket as `no_bucket`, each naming the store's error code: the caller (the cold tier's
 * offload backoff) retries later and keeps the local segment meanwhile. Credentials come from the
 * caller (the `AWS_*` environment variables in `cli/serve.ts`) and never appear in a message, a
 * log line or a URL (requests are signed in headers, not in the query).
 *
 * Bounds: a get, and each page of a list, has an overall deadline (`readTimeoutMs`, tries and waits
 * included), so a fetch of offloaded records and a topic create (which lists its prefix) answer
 * within it when the store hangs. {@link S3ColdStore.abort} (at shutdown) fails every request in
 * flight and every later one at once, without retries (attack18 F8: a SIGTERM waited 6 × 30 s for
 * an offload's PUT).
 */
import { createHash } from "node:crypto";
import { AwsClient } from "aws4fetch";
import { errorMessage } from "../lib/errors.ts";
import type { Logger } from "../lib/logger.ts";
import {
  ColdStoreError,
  isColdStoreError,
  isValidObjectKey,
  type ColdObjectInfo,
  type ColdObjectSource,
  type ColdStore,
  type ColdStoreErrorKind,
} from "../storage/cold-objects.ts";
import { deadline } from "./deadline.ts";

/** Where a `s3://bucket/prefix` URL points. */
export interface S3Location {
  bucket: string;
  /** Key prefix, empty or ending in "/". */
  prefix: string;
}

/**
 * Parses `s3://bucket[/prefix]` (`--cold-storage`).
 * @throws Error naming what is wrong: the scheme, the bucket name (3–63 characters of a–z, 0–9,
 *   `.` and `-`, starting and ending with a letter or digit), or the prefix (no empty, `.` or `..` parts).
 */
export function parseS3Url(url: string): S3Location {
  const m = /^s3:\/\/([^/]*)(?:\/(.*))?$/.exec(url);
  if (m === null)
    throw new Error(
      `Invalid cold storage URL ${JSON.stringify(url)}: expected s3://bucket or s3://bucket/prefix`,
    );
  const bucket = m[1];
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket) || bucket.includes(".."))
    throw new Error(
      `Invalid cold storage URL ${JSON.stringify(url)}: bucket ${JSON.stringify(bucket)} is not a bucket name (3–63 characters of a-z, 0-9, "." and "-", starting and ending with a letter or digit)`,
    );
  let prefix = m[2] ?? "";
  if (prefix.endsWith("/")) prefix = prefix.slice(0, -1);
  if (prefix !== "" && !isValidObjectKey(prefix))
    throw new Error(
      `Invalid cold storage URL ${JSON.stringify(url)}: prefix ${JSON.stringify(prefix)} has an empty, "." or ".." part`,
    );
  return { bucket, prefix: prefix === "" ? "" : `${prefix}/` };
}

/** Credentials for SigV4. Never logged. */
export interface S3Credentials {
  accessKeyId: string;
  secretAccessKey: string;
  sessionToken?: string;
}

/** Options of {@link S3ColdStore}. */
export interface S3ColdStoreOptions {
  location: S3Location;
  credentials: S3Credentials;
  /** Signing region (default "us-east-1"). */
  region?: string;
  /** Endpoint URL (`http://127.0.0.1:9000`); default AWS's regional endpoint. Path-style addressing when given. */
  endpoint?: string;
  logger: Logger;
  /** Tries per request before giving up as `unavailable` (default 6). */
  attempts?: number;
  /** First retry wait in ms, doubling per try up to `retryBackoffMaxMs` (default 100). */
  retryBackoffMs?: number;
  /** Longest retry wait in ms (default 5 000). */
  retryBackoffMaxMs?: number;
  /** Timeout of one request in ms (default 30 000; a part upload of `partBytes` must fit in it). */
  requestTimeoutMs?: number;
  /**
   * Time a {@link S3ColdStore.get} may take over all its tries, in ms (`--cold-read-timeout-ms`,
   * default {@link coldReadTimeoutMs}): a fetch of offloaded records waits for it, and must fail
   * before its client gives up (docs/operations.md "Cold tier unavailable").
   */
  readTimeoutMs?: number;
  /** Objects above this many bytes go up in parts (default 16 MiB). */
  multipartThresholdBytes?: number;
  /** Bytes per part (default 8 MiB; S3 wants at least 5 MiB except the last). */
  partBytes?: number;
  /** Parts uploaded at once (default 4). */
  concurrency?: number;
  /** Keys asked per listing page (default: the store's, 1 000 on S3); tests lower it to exercise paging. */
  listPageKeys?: number;
}

const MiB = 1024 * 1024;

/**
 * Default of `--cold-read-timeout-ms`: below the clients' request timeouts (the TCP client's
 * 30 s, the CLI's), so a fetch that needs a hung cold tier is answered `cold_tier_unavailable`
 * instead of timing out as a lost connection.
 */
export const coldReadTimeoutMs = 10_000;

/** Largest ranged GET of a read-back verification (module comment). */
const readBackChunkBytes = 8 * MiB;

/** Most listing pages followed before the listing is called endless. */
const listPagesMax = 1_000_000;

/**
 * What a put sent, for its verification: the ETag an MD5-keeping store answers, and each part's
 * byte range and MD5 (one part for a single PUT).
 */
interface SentObject {
  etag: string;
  parts: { start: number; end: number; md5: Buffer }[];
}

/** A failed HTTP exchange: status 0 for no answer. */
interface Failure {
  status: number;
  code: string;
  message: string;
  retriable: boolean;
}

/** See the module comment. */
export class S3ColdStore implements ColdStore {
  readonly location: string;
  #bucket: string;
  #prefix: string;
  #client: AwsClient;
  #base: string;
  #logger: Logger;
  #attempts: number;
  #backoffMs: number;
  #backoffMaxMs: number;
  #timeoutMs: number;
  #readTimeoutMs: number;
  #thresholdBytes: number;
  #partBytes: number;
  #concurrency: number;
  #listPageKeys: number | undefined;
  /** Keys with a CreateMultipartUpload in flight, and upload ids of this process not yet finished. */
  #starting = new Map<string, number>();
  #uploading = new Set<string>();
  /** Whether `cold.s3_read_back_verification` was logged (once per store). */
  #readBackLogged = false;
  /** Aborted by {@link abort}: every request in flight and later fails at once. */
  #stopping = new AbortController();

  constructor(options: S3ColdStoreOptions) {
    const { bucket, prefix } = options.location;
    this.#bucket = bucket;
    this.#prefix = prefix;
    this.location = `s3://${bucket}/${prefix}`;
    const region = options.region ?? "us-east-1";
    this.#client = new AwsClient({
      accessKeyId: options.credentials.accessKeyId,
      secretAccessKey: options.credentials.secretAccessKey,
      sessionToken: options.credentials.sessionToken,
      service: "s3",
      region,
      retries: 0,
    });
    if (options.endpoint !== undefined) {
      const endpoint = new URL(options.endpoint);
      if (endpoint.protocol !== "http:" && endpoint.protocol !== "https:")
        throw new Error(
          `Invalid S3 endpoint ${JSON.stringify(options.endpoint)}: expected an http:// or https:// URL`,
        );
      this.#base = `${endpoint.origin}${endpoint.pathname.replace(/\/$/, "")}/${bucket}`;
    } else {
      this.#base = `https://${bucket}.s3.${region}.amazonaws.com`;
    }
    this.#logger = options.logger;
    this.#attempts = options.attempts ?? 6;
    this.#backoffMs = options.retryBackoffMs ?? 100;
    this.#backoffMaxMs = options.retryBackoffMaxMs ?? 5_000;
    this.#timeoutMs = options.requestTimeoutMs ?? 30_000;
    this.#readTimeoutMs = options.readTimeoutMs ?? coldReadTimeoutMs;
    this.#thresholdBytes = options.multipartThresholdBytes ?? 16 * MiB;
    this.#partBytes = options.partBytes ?? 8 * MiB;
    this.#concurrency = Math.max(1, options.concurrency ?? 4);
    this.#listPageKeys = options.listPageKeys;
  }

  #url(key: string | null, query = ""): string {
    const path =
      key === null
        ? ""
        : `/${(this.#prefix + key)
            .split("/")
            .map((p) => encodeURIComponent(p))
            .join("/")}`;
    return `${this.#base}${path === "" ? "/" : path}${query === "" ? "" : `?${query}`}`;
  }

  /** See {@link ColdStore.abort}: requests in flight fail at once, later ones without trying. */
  abort(): void {
    this.#stopping.abort();
  }

  #stoppedError(what: string): ColdStoreError {
    return new ColdStoreError(
      "unavailable",
      `Cannot ${what} in ${this.location}: the broker is shutting down`,
    );
  }

  #checkKey(key: string): void {
    if (!isValidObjectKey(key))
      throw new ColdStoreError("invalid", `Invalid cold object key ${JSON.stringify(key)}`);
  }

  /**
   * One request with retries (module comment). `accept` says which statuses are answers; the
   * response body is read inside the retry loop, so a reset mid-body is retried too.
   */
  async #request<T>(
    what: string,
    build: () => {
      method: string;
      url: string;
      headers?: Record<string, string>;
      body?: Uint8Array | string;
    },
    accept: (status: number) => boolean,
    read: (response: Response) => Promise<T>,
    budgetMs?: number,
  ): Promise<T> {
    let last: Failure | null = null;
    // With a budget (reads), the tries, their timeouts and the waits between them all fit in it.
    const started = performance.now();
    const left = () =>
      budgetMs === undefined ? Number.POSITIVE_INFINITY : budgetMs - (performance.now() - started);
    let tries = 0;
    for (let attempt = 1; attempt <= this.#attempts; attempt++) {
      const stopping = this.#stopping.signal;
      if (attempt > 1) {
        const ceiling = Math.min(this.#backoffMaxMs, this.#backoffMs * 2 ** (attempt - 2));
        const wait = ceiling / 2 + Math.random() * (ceiling / 2);
        if (wait >= left()) break;
        await new Promise<void>((r) => {
          const done = () => {
            clearTimeout(timer);
            stopping.removeEventListener("abort", done);
            r();
          };
          const timer = setTimeout(done, wait);
          stopping.addEventListener("abort", done, { once: true });
        });
      }
      if (stopping.aborted) throw this.#stoppedError(what);
      const timeoutMs = Math.max(1, Math.floor(Math.min(this.#timeoutMs, left())));
      tries = attempt;
      const req = build();
      let failure: Failure;
      // Given to fetch itself, not inside a Request (aws4fetch's own fetch): a signal that
      // reaches fetch that way is held only weakly (see deadline.ts).
      const timeout = deadline(timeoutMs, stopping);
      try {
        const signed = await this.#client.sign(req.url, {
          method: req.method,
          headers: req.headers,
          body: req.body,
        });
        const response = await fetch(signed.url, {
          method: signed.method,
          headers: signed.headers,
          body: req.body,
          signal: timeout.signal,
        });
        if (accept(response.status)) return await read(response);
        failure = await describeFailure(response);
      } catch (err) {
        if (stopping.aborted) throw this.#stoppedError(what);
        // A short or malformed answer is retried like a reset; other refusals are final.
        if (err instanceof ColdStoreError && err.kind !== "corrupt") throw err;
        const timedOut =
          err instanceof Error && (err.name === "TimeoutError" || err.name === "AbortError");
        failure = {
          status: 0,
          code:
            err instanceof ColdStoreError ? "BadAnswer" : timedOut ? "Timeout" : "ConnectionError",
          message: timedOut ? `no answer within ${timeoutMs} ms` : errorMessage(err) + causeOf(err),
          retriable: true,
        };
      } finally {
        timeout.clear();
      }
      last = failure;
      if (!failure.retriable || attempt === this.#attempts || left() <= 0) break;
      this.#logger.log("warn", "cold.s3_retry", {
        store: this.location,
        action: what,
        attempt,
        attempts: this.#attempts,
        status: failure.status,
        code: failure.code,
        error: failure.message,
      });
    }
    const f = last as Failure;
    const kind: ColdStoreErrorKind =
      f.code === "BadAnswer"
        ? // A read (the only requests with a budget) answered short every time is the store or
          // the path to it failing: retry later. A write the store never kept whole stays corrupt.
          budgetMs !== undefined
          ? "unavailable"
          : "corrupt"
        : f.status === 403
          ? "access_denied"
          : f.code === "NoSuchBucket"
            ? "no_bucket"
            : f.status === 404
              ? "not_found"
              : f.retriable
                ? "unavailable"
                : f.status === 400
                  ? "invalid"
                  : "unavailable";
    const hint =
      kind === "access_denied"
        ? " (check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY and the bucket policy)"
        : kind === "no_bucket"
          ? ` (bucket "${this.#bucket}" does not exist at ${this.#base.replace(/\/[^/]*$/, "") || this.#base})`
          : "";
    const gaveUp =
      tries < this.#attempts
        ? ` (gave up after ${tries} ${tries === 1 ? "try" : "tries"}: the ${budgetMs} ms read deadline, --cold-read-timeout-ms)`
        : ` (after ${this.#attempts} tries)`;
    throw new ColdStoreError(
      kind,
      `Cannot ${what} in ${this.location}: ${f.status === 0 ? "" : `HTTP ${f.status} `}${f.code}: ${f.message}${hint}${f.retriable ? gaveUp : ""}`,
    );
  }

  async put(key: string, source: ColdObjectSource): Promise<ColdObjectInfo> {
    this.#checkKey(key);
    let lastProblem = "";
    for (let attempt = 1; attempt <= this.#attempts; attempt++) {
      const expected =
        source.sizeBytes <= this.#thresholdBytes
          ? await this.#putSingle(key, source)
          : await this.#putMultipart(key, source);
      const problem = await this.#verify(key, source.sizeBytes, expected);
      if (problem === null) return { key, sizeBytes: source.sizeBytes };
      lastProblem = problem;
      this.#logger.log("error", "cold.s3_verify_failed", {
        store: this.location,
        key,
        attempt,
        problem,
        action: "uploading it again",
      });
    }
    throw new ColdStoreError(
      "corrupt",
      `Cannot store cold object "${key}" in ${this.location}: the store kept holding something else than was sent (${lastProblem})`,
    );
  }

  /** One PUT. @returns what was sent (the expected ETag is the MD5's hex). */
  async #putSingle(key: string, source: ColdObjectSource): Promise<SentObject> {
    const body = await readAll(source, 0, source.sizeBytes);
    const md5 = createHash("md5").update(body).digest();
    await this.#request(
      `store cold object "${key}"`,
      () => ({
        method: "PUT",
        url: this.#url(key),
        headers: {
          "content-md5": md5.toString("base64"),
          "content-type": "application/octet-stream",
        },
        body,
      }),
      (s) => s === 200,
      async (r) => void (await r.arrayBuffer()),
    );
    return { etag: md5.toString("hex"), parts: [{ start: 0, end: source.sizeBytes, md5 }] };
  }

  /** A multipart upload (module comment). @returns what was sent (the expected ETag is `<md5 of md5s>-<n>`). */
  async #putMultipart(key: string, source: ColdObjectSource): Promise<SentObject> {
    // Marked before it exists, so abortStaleUploads never takes an upload being started for ours.
    this.#starting.set(key, (this.#starting.get(key) ?? 0) + 1);
    let uploadId: string | null;
    try {
      const created = await this.#request(
        `start a multipart upload of cold object "${key}"`,
        () => ({ method: "POST", url: this.#url(key, "uploads") }),
        (s) => s === 200,
        async (r) => await r.text(),
      );
      uploadId = xmlText(created, "UploadId");
      if (uploadId !== null) this.#uploading.add(uploadId);
    } finally {
      const n = this.#starting.get(key)! - 1;
      if (n === 0) this.#starting.delete(key);
      else this.#starting.set(key, n);
    }
    if (uploadId === null)
      throw new ColdStoreError(
        "unavailable",
        `Cannot start a multipart upload of cold object "${key}" in ${this.location}: the answer has no UploadId`,
      );
    try {
      return await this.#uploadParts(key, uploadId, source);
    } finally {
      this.#uploading.delete(uploadId);
    }
  }

  /** The parts, completion (or abort) of upload `uploadId` of `key`. @returns what was sent. */
  async #uploadParts(key: string, uploadId: string, source: ColdObjectSource): Promise<SentObject> {
    const count = Math.ceil(source.sizeBytes / this.#partBytes);
    const md5s: Buffer[] = new Array(count);
    const etags: string[] = new Array(count);
    try {
      let next = 0;
      const worker = async (): Promise<void> => {
        while (next < count) {
          const i = next++;
          const start = i * this.#partBytes;
          const body = await readAll(
            source,
            start,
            Math.min(this.#partBytes, source.sizeBytes - start),
          );
          const md5 = createHash("md5").update(body).digest();
          md5s[i] = md5;
          const query = `partNumber=${i + 1}&uploadId=${encodeURIComponent(uploadId)}`;
          const etag = await this.#request(
            `upload part ${i + 1} of ${count} of cold object "${key}"`,
            () => ({
              method: "PUT",
              url: this.#url(key, query),
              headers: { "content-md5": md5.toString("base64") },
              body,
            }),
            (s) => s === 200,
            async (r) => {
              await r.arrayBuffer();
              return unquote(r.headers.get("etag") ?? "");
            },
          );
          // A part ETag that is not the part's MD5 (SSE-KMS, or a corrupt part) is settled by
          // the verification of the whole object (module comment).
          etags[i] = etag;
        }
      };
      await Promise.all(Array.from({ length: Math.min(this.#concurrency, count) }, worker));
      const xml = `<CompleteMultipartUpload>${etags
        .map(
          (e, i) => `<Part><PartNumber>${i + 1}</PartNumber><ETag>"${xmlEscape(e)}"</ETag></Part>`,
        )
        .join("")}</CompleteMultipartUpload>`;
      const done = await this.#request(
        `complete the multipart upload of cold object "${key}"`,
        () => ({
          method: "POST",
          url: this.#url(key, `uploadId=${encodeURIComponent(uploadId)}`),
          headers: { "content-type": "application/xml" },
          body: xml,
        }),
        (s) => s === 200,
        async (r) => await r.text(),
      );
      // CompleteMultipartUpload can answer 200 with an error in the body.
      if (xmlText(done, "Code") !== null && xmlText(done, "ETag") === null)
        throw new ColdStoreError(
          "unavailable",
          `Cannot complete the multipart upload of cold object "${key}" in ${this.location}: ${xmlText(done, "Code")}: ${xmlText(done, "Message") ?? ""}`,
        );
    } catch (err) {
      await this.#request(
        `abort the multipart upload of cold object "${key}"`,
        () => ({
          method: "DELETE",
          url: this.#url(key, `uploadId=${encodeURIComponent(uploadId)}`),
        }),
        (s) => s === 204 || s === 200 || s === 404,
        async (r) => void (await r.arrayBuffer()),
      ).catch(() => {});
      throw err;
    }
    return {
      etag: `${createHash("md5").update(Buffer.concat(md5s)).digest("hex")}-${count}`,
      parts: md5s.map((md5, i) => ({
        start: i * this.#partBytes,
        end: Math.min(source.sizeBytes, (i + 1) * this.#partBytes),
        md5,
      })),
    };
  }

  /**
   * Multipart uploads under the prefix that no one finishes: a crash (or a kill) in the middle of
   * an upload leaves one open, and the store keeps its parts — and bills them — until it is
   * aborted. Lists them (ListMultipartUploads, every page) and aborts each whose key is one this
   * tier writes (`isOwnKey`) and that this process is not uploading now; uploads of other keys
   * under the prefix are foreign: counted, never aborted. Run at start and periodically.
   * @returns the keys aborted, and the number of foreign uploads left alone.
   * @throws ColdStoreError when the listing fails (an abort that fails is retried next time).
   */
  async abortStaleUploads(
    isOwnKey: (key: string) => boolean,
  ): Promise<{ aborted: string[]; failed: number; foreign: number }> {
    const aborted: string[] = [];
    let failed = 0;
    let foreign = 0;
    for (const upload of await this.listUploads()) {
      if (!isOwnKey(upload.key)) {
        foreign++;
        continue;
      }
      if (this.#uploading.has(upload.uploadId) || this.#starting.has(upload.key)) continue;
      try {
        await this.#request(
          `abort the stale multipart upload of cold object "${upload.key}"`,
          () => ({
            method: "DELETE",
            url: this.#url(upload.key, `uploadId=${encodeURIComponent(upload.uploadId)}`),
          }),
          (s) => s === 204 || s === 200 || s === 404,
          async (r) => void (await r.arrayBuffer()),
        );
        aborted.push(upload.key);
      } catch {
        failed++;
      }
    }
    return { aborted, failed, foreign };
  }

  /**
   * The multipart uploads open under the prefix (ListMultipartUploads, every page), keys relative
   * to the prefix. @throws ColdStoreError when a page fails or is truncated without markers.
   */
  async listUploads(): Promise<{ key: string; uploadId: string }[]> {
    const out: { key: string; uploadId: string }[] = [];
    let keyMarker: string | null = null;
    let idMarker: string | null = null;
    for (let page = 0; page < listPagesMax; page++) {
      const query: string =
        `uploads&prefix=${encodeURIComponent(this.#prefix)}` +
        (keyMarker === null ? "" : `&key-marker=${encodeURIComponent(keyMarker)}`) +
        (idMarker === null ? "" : `&upload-id-marker=${encodeURIComponent(idMarker)}`);
      const xml = await this.#request(
        "list open multipart uploads",
        () => ({ method: "GET", url: this.#url(null, query) }),
        (s) => s === 200,
        async (r) => await r.text(),
      );
      for (const upload of xmlAll(xml, "Upload")) {
        const key = xmlText(upload, "Key");
        const uploadId = xmlText(upload, "UploadId");
        if (key === null || uploadId === null || !key.startsWith(this.#prefix)) continue;
        out.push({ key: key.slice(this.#prefix.length), uploadId });
      }
      if (xmlText(xml, "IsTruncated") !== "true") return out;
      keyMarker = xmlText(xml, "NextKeyMarker");
      idMarker = xmlText(xml, "NextUploadIdMarker");
      if (keyMarker === null || keyMarker === "")
        throw new ColdStoreError(
          "corrupt",
          `Cannot list open multipart uploads in ${this.location}: page ${page + 1} is truncated but has no NextKeyMarker`,
        );
    }
    throw new ColdStoreError(
      "corrupt",
      `Cannot list open multipart uploads in ${this.location}: more than ${listPagesMax} pages`,
    );
  }

  /**
   * Reads back size and checksum (module comment): the ETag when it is the MD5 sent, else the
   * object's bytes, part by part. @returns null if the object is what was sent, else the problem.
   * @throws ColdStoreError when the store cannot be asked (not for what it answers).
   */
  async #verify(key: string, sizeBytes: number, sent: SentObject): Promise<string | null> {
    const head = await this.#request(
      `check cold object "${key}"`,
      () => ({ method: "HEAD", url: this.#url(key) }),
      (s) => s === 200 || s === 404,
      async (r) => ({
        status: r.status,
        size: Number(r.headers.get("content-length") ?? "-1"),
        etag: unquote(r.headers.get("etag") ?? ""),
        encryption:
          r.headers.get("x-amz-server-side-encryption-customer-algorithm") !== null
            ? "SSE-C"
            : r.headers.get("x-amz-server-side-encryption"),
      }),
    );
    if (head.status === 404) return "the object is missing after its upload";
    if (head.size !== sizeBytes)
      return `the store holds ${head.size} bytes, ${sizeBytes} were sent`;
    if (head.etag === sent.etag) return null;
    // The ETag proves nothing here (module comment): compare the bytes the store gives back.
    const readBack = await this.#readBack(key, sent);
    if (readBack !== null)
      return `the store's ETag is ${JSON.stringify(head.etag)} (the bytes sent give ${sent.etag}) and ${readBack}`;
    if (!this.#readBackLogged) {
      this.#readBackLogged = true;
      this.#logger.log("info", "cold.s3_read_back_verification", {
        store: this.location,
        key,
        etag: head.etag,
        encryption: head.encryption ?? "none",
        reason:
          "the store's ETag is not the MD5 of the object (SSE-KMS, SSE-C, or a store that does not use MD5s)",
        cost: "each object is read back once after its upload to verify it",
      });
    }
    return null;
  }

  /** Reads the object back and compares each part's MD5 with the sent one; null if all match, else the problem. */
  async #readBack(key: string, sent: SentObject): Promise<string | null> {
    for (const [i, part] of sent.parts.entries()) {
      const hash = createHash("md5");
      for (let pos = part.start; pos < part.end; pos += readBackChunkBytes) {
        const end = Math.min(part.end, pos + readBackChunkBytes);
        try {
          hash.update(await this.get(key, { start: pos, end }));
        } catch (err) {
          if (isColdStoreError(err, "corrupt") || isColdStoreError(err, "not_found"))
            return `reading it back failed: ${errorMessage(err)}`;
          throw err;
        }
      }
      const md5 = hash.digest();
      if (!md5.equals(part.md5))
        return `the bytes [${part.start}, ${part.end}) read back${sent.parts.length > 1 ? ` (part ${i + 1})` : ""} give MD5 ${md5.toString("hex")}, the bytes sent ${part.md5.toString("hex")}`;
    }
    return null;
  }

  async get(key: string, range?: { start: number; end: number }): Promise<Uint8Array> {
    this.#checkKey(key);
    if (range !== undefined) {
      const { start, end } = range;
      if (!(Number.isSafeInteger(start) && Number.isSafeInteger(end) && 0 <= start && start <= end))
        throw new ColdStoreError(
          "invalid",
          `Cannot read cold object "${key}": invalid range [${start}, ${end})`,
        );
      if (start === end) return new Uint8Array(0);
    }
    return await this.#request(
      `read cold object "${key}"${range === undefined ? "" : ` bytes [${range.start}, ${range.end})`}`,
      () => ({
        method: "GET",
        url: this.#url(key),
        headers:
          range === undefined ? undefined : { range: `bytes=${range.start}-${range.end - 1}` },
      }),
      (s) => s === 200 || s === 206,
      async (r) => {
        const bytes = new Uint8Array(await r.arrayBuffer());
        const want =
          range === undefined
            ? Number(r.headers.get("content-length") ?? bytes.length)
            : range.end - range.start;
        if (bytes.length !== want || (range !== undefined && r.status !== 206 && range.start !== 0))
          throw new ColdStoreError(
            "corrupt",
            `Cannot read cold object "${key}" in ${this.location}: the answer holds ${bytes.length} bytes, ${want} were asked for`,
          );
        return bytes;
      },
      this.#readTimeoutMs,
    );
  }

  async list(prefix: string): Promise<ColdObjectInfo[]> {
    const out: ColdObjectInfo[] = [];
    let token: string | null = null;
    for (let page = 0; page < listPagesMax; page++) {
      const query: string =
        `list-type=2&prefix=${encodeURIComponent(this.#prefix + prefix)}` +
        (this.#listPageKeys === undefined ? "" : `&max-keys=${this.#listPageKeys}`) +
        (token === null ? "" : `&continuation-token=${encodeURIComponent(token)}`);
      const xml = await this.#request(
        `list cold objects under "${prefix}"`,
        () => ({ method: "GET", url: this.#url(null, query) }),
        (s) => s === 200,
        async (r) => await r.text(),
        this.#readTimeoutMs,
      );
      for (const contents of xmlAll(xml, "Contents")) {
        const key = xmlText(contents, "Key");
        const size = Number(xmlText(contents, "Size") ?? "NaN");
        if (key === null || !Number.isSafeInteger(size))
          throw new ColdStoreError(
            "corrupt",
            `Cannot list cold objects under "${prefix}" in ${this.location}: an entry has no key or size`,
          );
        if (!key.startsWith(this.#prefix)) continue;
        out.push({ key: key.slice(this.#prefix.length), sizeBytes: size });
      }
      if (xmlText(xml, "IsTruncated") !== "true") return out;
      token = xmlText(xml, "NextContinuationToken");
      if (token === null || token === "")
        throw new ColdStoreError(
          "corrupt",
          `Cannot list cold objects under "${prefix}" in ${this.location}: page ${page + 1} is truncated but has no continuation token (a listing is complete or fails)`,
        );
    }
    throw new ColdStoreError(
      "corrupt",
      `Cannot list cold objects under "${prefix}" in ${this.location}: more than ${listPagesMax} pages`,
    );
  }

  async delete(key: string): Promise<void> {
    this.#checkKey(key);
    await this.#request(
      `delete cold object "${key}"`,
      () => ({ method: "DELETE", url: this.#url(key) }),
      (s) => s === 204 || s === 200 || s === 404,
      async (r) => void (await r.arrayBuffer()),
    );
  }

  /**
   * Checks the bucket is reachable and the credentials work (one listing request, no retries
   * beyond the usual). @returns null, or the problem (for a start-up log line).
   */
  async probe(): Promise<ColdStoreError | null> {
    try {
      await this.#request(
        "list the bucket",
        () => ({
          method: "GET",
          url: this.#url(null, `list-type=2&max-keys=1&prefix=${encodeURIComponent(this.#prefix)}`),
        }),
        (s) => s === 200,
        async (r) => void (await r.text()),
      );
      return null;
    } catch (err) {
      if (err instanceof ColdStoreError) return err;
      throw err;
    }
  }
}

/** The error of a non-accepted answer, classified (module comment). */
async function describeFailure(response: Response): Promise<Failure> {
  const text = await response.text().catch(() => "");
  const code =
    xmlText(text, "Code") ??
    (response.status === 404
      ? "NotFound"
      : response.status === 403
        ? "Forbidden"
        : `HTTP${response.status}`);
  const message = (xmlText(text, "Message") ?? response.statusText ?? "").slice(0, 300);
  const retriable =
    response.status >= 500 ||
    response.status === 429 ||
    code === "SlowDown" ||
    code === "RequestTimeout" ||
    code === "InternalError";
  return { status: response.status, code, message, retriable };
}

/** `: <cause>` of a fetch error (undici hides the socket error there), or "". */
function causeOf(err: unknown): string {
  const cause = err instanceof Error ? (err as { cause?: unknown }).cause : undefined;
  return cause === undefined ? "" : `: ${errorMessage(cause)}`;
}

/** Reads `[start, start + length)` of a source whole. */
async function readAll(
  source: ColdObjectSource,
  start: number,
  length: number,
): Promise<Uint8Array> {
  const out = new Uint8Array(length);
  let got = 0;
  while (got < length) {
    const chunk = await source.read(start + got, length - got);
    if (chunk.length === 0)
      throw new ColdStoreError(
        "invalid",
        `Cannot upload: the source ended at byte ${start + got} of ${source.sizeBytes}`,
      );
    out.set(chunk, got);
    got += chunk.length;
  }
  return out;
}

function unquote(etag: string): string {
  return etag.replace(/^W\//, "").replace(/^"|"$/g, "");
}

/** The decoded text of the first `<tag>…</tag>` in `xml`, or null. */
export function xmlText(xml: string, tag: string): string | null {
  const m = new RegExp(`<${tag}(?:\\s[^>]*)?>([\\s\\S]*?)</${tag}>`).exec(xml);
  return m === null ? null : xmlDecode(m[1]);
}

/** The raw inner texts of every `<tag>…</tag>` in `xml`. */
function xmlAll(xml: string, tag: string): string[] {
  return [...xml.matchAll(new RegExp(`<${tag}(?:\\s[^>]*)?>([\\s\\S]*?)</${tag}>`, "g"))].map(
    (m) => m[1],
  );
}

function xmlDecode(text: string): string {
  return text.replace(/&(#x[0-9a-fA-F]+|#\d+|amp|lt|gt|quot|apos);/g, (_, e: string) =>
    e === "amp"
      ? "&"
      : e === "lt"
        ? "<"
        : e === "gt"
          ? ">"
          : e === "quot"
            ? '"'
            : e === "apos"
              ? "'"
              : String.fromCodePoint(
                  e.startsWith("#x") ? Number.parseInt(e.slice(2), 16) : Number(e.slice(1)),
                ),
  );
}

function xmlEscape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/**
 * The S3 store `--cold-storage URL` names, configured the standard way: credentials from
 * `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN` only (never arguments, so
 * they stay out of `ps` and shell history); endpoint from the flag, `AWS_ENDPOINT_URL_S3` or
 * `AWS_ENDPOINT_URL`; region from the flag, `AWS_REGION` or `AWS_DEFAULT_REGION`.
 * @throws Error naming the bad URL, endpoint or missing variable (never quoting a secret).
 */
export function s3ColdStoreFromEnvironment(options: {
  url: string;
  endpoint?: string;
  region?: string;
  /** `--cold-read-timeout-ms` ({@link S3ColdStoreOptions.readTimeoutMs}). */
  readTimeoutMs?: number;
  env: Record<string, string | undefined>;
  logger: Logger;
}): S3ColdStore {
  const { env } = options;
  const location = parseS3Url(options.url);
  const accessKeyId = env.AWS_ACCESS_KEY_ID ?? "";
  const secretAccessKey = env.AWS_SECRET_ACCESS_KEY ?? "";
  if (accessKeyId === "" || secretAccessKey === "")
    throw new Error(
      `--cold-storage ${options.url} needs credentials in the environment: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary ones)`,
    );
  const endpoint = options.endpoint ?? env.AWS_ENDPOINT_URL_S3 ?? env.AWS_ENDPOINT_URL;
  if (endpoint !== undefined && !URL.canParse(endpoint))
    throw new Error(`Invalid S3 endpoint ${JSON.stringify(endpoint)}: not a URL`);
  return new S3ColdStore({
    location,
    credentials: {
      accessKeyId,
      secretAccessKey,
      sessionToken: env.AWS_SESSION_TOKEN === "" ? undefined : env.AWS_SESSION_TOKEN,
    },
    region: options.region ?? env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? "us-east-1",
    endpoint,
    logger: options.logger,
    readTimeoutMs: options.readTimeoutMs,
  });
}
