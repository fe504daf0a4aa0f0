/**
 * The key administration routes (admin keys only; `docs/http-api.md`, "API keys"):
 *
 * | method & path                    | success                                               |
 * |----------------------------------|-------------------------------------------------------|
 * | `POST /v1/admin/keys`            | 201 the key's metadata and `"key"`: its text, shown once |
 * | `GET /v1/admin/keys`             | 200 `{"keys":[…]}`, metadata only (never a hash or secret) |
 * | `DELETE /v1/admin/keys/{name}`   | 204, no body; the key is refused from then on          |
 *
 * Answers carry `Cache-Control: no-store`. They call the principal's broker view
 * (`auth/access.ts`), which refuses non-admin keys with 403 `forbidden`.
 */
import type { Context } from "hono";
import type { AuthorizedBroker } from "../../auth/access.ts";
import type { ApiKeyInfo } from "../../auth/key-store.ts";
import type { HttpApp } from "./app.ts";
import { invalidRequest } from "./errors.ts";
import { clip, quote } from "../../lib/quote.ts";
import type { BodyReaders } from "./groups.ts";

const noStore = { "cache-control": "no-store" };

/** The JSON shape of a key's metadata. */
export function keyInfoJson(info: ApiKeyInfo): Record<string, unknown> {
  return {
    id: info.id,
    name: info.name,
    role: info.role,
    topics: info.topics,
    groups: info.groups,
    created_ms: info.created_ms,
    last_used_ms: info.last_used_ms,
  };
}

/** Registers the routes of the module comment on `app`, calling `broker`. */
export function registerKeyRoutes(
  app: HttpApp,
  options: { broker: AuthorizedBroker; limitBody: (c: Context) => void } & BodyReaders,
): void {
  const { broker, limitBody, readBody, parseJson } = options;

  app.post("/v1/admin/keys", async (c) => {
    limitBody(c);
    let action = "Cannot create key";
    const body = parseJson(await readBody(c, action), action);
    if (typeof body !== "object" || body === null || Array.isArray(body))
      throw invalidRequest(
        action,
        'the body must be a JSON object like {"name":"ingest","role":"producer","topics":["orders.*"]}',
      );
    const fields = body as Record<string, unknown>;
    for (const field of Object.keys(fields)) {
      if (!["name", "role", "topics", "groups"].includes(field))
        throw invalidRequest(
          action,
          `unknown field ${quote(field)} (expected name, role, topics, groups)`,
          { field: clip(field) },
        );
    }
    if (typeof fields.name === "string") action = `Cannot create key ${quote(fields.name)}`;
    const created = await broker.createKey({
      name: fields.name,
      role: fields.role,
      topics: fields.topics,
      groups: fields.groups,
    });
    return c.json({ key: created.key, ...keyInfoJson(created.info) }, 201, noStore);
  });

  app.get("/v1/admin/keys", (c) =>
    c.json({ keys: broker.listKeys().map(keyInfoJson) }, 200, noStore),
  );

  app.delete("/v1/admin/keys/:name", async (c) => {
    await broker.revokeKey(c.req.param("name"));
    return c.body(null, 204, noStore);
  });
}
