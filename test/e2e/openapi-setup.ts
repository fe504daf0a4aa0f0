/**
 * Setup file of every end-to-end project: each answer `fetch` gets from a broker this test process
 * started (`brokerOrigins` of harness.ts) is checked against the OpenAPI document
 * (test/helpers/openapi.ts, with the validators openapi-validators.ts compiled) — status listed for the operation, content type, JSON body valid in
 * ajv's strict mode — and a test that received an answer the document does not describe fails,
 * naming it. Event streams are checked by status and content type only (their body never ends).
 */
import { afterEach, expect, inject } from "vitest";
import { standaloneChecker } from "../helpers/openapi-answers.ts";
import { brokerOrigins } from "./harness.ts";

// Compiled once per run by the global setup openapi-validators.ts: importing the document and
// ajv and compiling its schemas in every file cost about a CPU-second per file.
const checker = standaloneChecker(inject("openapiCheckerCode"));
const pending: Promise<void>[] = [];
const mismatches: string[] = [];
const realFetch = globalThis.fetch;

globalThis.fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
  const response = await realFetch(input, init);
  const url = new URL(input instanceof Request ? input.url : String(input));
  if (!brokerOrigins.has(url.origin)) return response;
  const method = (init?.method ?? (input instanceof Request ? input.method : "GET")).toUpperCase();
  const contentType = response.headers.get("content-type");
  const streaming = (contentType ?? "").startsWith("text/event-stream");
  const answer = { method, path: url.pathname, status: response.status, contentType };
  if (method === "HEAD" || streaming) {
    mismatches.push(...checker.check({ ...answer, body: undefined }));
    return response;
  }
  const copy = response.clone();
  pending.push(
    copy.text().then(
      (body) => void mismatches.push(...checker.check({ ...answer, body })),
      () => {}, // the broker went away mid-body (a test that kills it): nothing to check
    ),
  );
  return response;
};

afterEach(async () => {
  await Promise.all(pending.splice(0));
  const found = mismatches.splice(0);
  expect(
    found,
    "answers that do not match the OpenAPI document (src/transport/http/openapi.ts)",
  ).toEqual([]);
});
