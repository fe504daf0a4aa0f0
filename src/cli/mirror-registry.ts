/**
 * The mirror's client of the upstream's schema registry (`--mirror-registry-url`, docs/edge.md
 * "Schema ids upstream"): Confluent's HTTP API over HTTP(S), with the mirror's API key as a bearer
 * token and the mirror's TLS options, each request within the mirror's time limit.
 */
import * as http from "node:http";
import * as https from "node:https";
import type { ConnectionOptions } from "node:tls";
import { UsageError } from "./args.ts";
import { errorMessage } from "../lib/errors.ts";
import type { RegistryAnswer, UpstreamRegistry } from "../mirror/schemas.ts";
import { RegistryError, RegistryErrors } from "../registry/errors.ts";
import type { SchemaRegistry } from "../registry/registry.ts";
import type { EdgeSchemas } from "../mirror/schemas.ts";

const mediaType = "application/vnd.schemaregistry.v1+json";
/** Largest registry answer read, bytes (an answer carries one schema: at most 1 MiB of it). */
const answerBytesMax = 4 * 1024 * 1024;

/**
 * Checks `--mirror-registry-url`: http:// or https://, no user or password in it (secrets never
 * reach argv; the key is `--mirror-api-key-file`'s). @throws UsageError naming what is wrong.
 */
export function parseMirrorRegistryUrl(text: string): URL {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new UsageError(
      "--mirror-registry-url is not a URL: give the upstream's registry, http(s)://HOST:HTTP_PORT/registry",
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:")
    throw new UsageError(
      `--mirror-registry-url must start with http:// or https://, got ${JSON.stringify(url.protocol)}`,
    );
  if (url.username !== "" || url.password !== "")
    throw new UsageError(
      "--mirror-registry-url must not carry a user or password: the mirror sends its --mirror-api-key-file key",
    );
  if (url.search !== "" || url.hash !== "")
    throw new UsageError("--mirror-registry-url takes no query or fragment");
  return url;
}

/**
 * The upstream registry at `base` for the mirror: POSTs JSON with the key `key()` gives at each
 * request as `Authorization: Bearer` (never in a message; SIGHUP may have re-read it), `tls` for
 * https://, and fails after `timeoutMs` without an answer.
 */
export function upstreamRegistry(
  base: URL,
  key: () => string | undefined,
  tls: ConnectionOptions | undefined,
  timeoutMs: number,
): UpstreamRegistry {
  const shown = base.href.replace(/\/+$/, "");
  return {
    url: shown,
    post(path: string, body: unknown): Promise<RegistryAnswer> {
      const url = new URL(`${base.pathname.replace(/\/+$/, "")}${path}`, base);
      const text = JSON.stringify(body);
      const headers: Record<string, string> = { accept: mediaType, "content-type": mediaType };
      const bearer = key();
      if (bearer !== undefined) headers.authorization = `Bearer ${bearer}`;
      const send = url.protocol === "https:" ? https.request : http.request;
      return new Promise((resolve, reject) => {
        const req = send(
          url,
          { method: "POST", headers, ...(url.protocol === "https:" ? (tls ?? {}) : {}) },
          (res) => {
            const chunks: Buffer[] = [];
            let size = 0;
            res.on("data", (chunk: Buffer) => {
              size += chunk.length;
              if (size > answerBytesMax) {
                req.destroy(new Error(`the answer is over ${answerBytesMax} bytes`));
                return;
              }
              chunks.push(chunk);
            });
            res.on("error", (err) => reject(new Error(errorMessage(err))));
            res.on("end", () => {
              const answer = Buffer.concat(chunks).toString("utf8");
              let value: unknown = null;
              try {
                value = answer === "" ? null : JSON.parse(answer);
              } catch {
                value = {
                  message: `HTTP ${res.statusCode ?? 0}, not JSON: ${answer.slice(0, 200)}`,
                };
              }
              resolve({ status: res.statusCode ?? 0, body: value });
            });
          },
        );
        req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
        req.on("error", (err) => reject(new Error(errorMessage(err))));
        req.end(text);
      });
    },
  };
}

/**
 * The edge's registry as the mirror reads it: `current()` is asked at each call (a cluster
 * broker swaps in the cluster's registry after start). Soft-deleted versions count: records
 * written while they were live must still be translated.
 */
export function edgeSchemas(current: () => SchemaRegistry): EdgeSchemas {
  return {
    schemaById(id: number) {
      try {
        return current().schemaById(id);
      } catch (err) {
        if (err instanceof RegistryError && err.kind === RegistryErrors.schemaNotFound) return null;
        throw err;
      }
    },
  };
}
