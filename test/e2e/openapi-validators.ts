/**
 * Global setup of each `e2e:*` project: compiles the OpenAPI document's answer schemas once per
 * run into ajv's standalone code (test/helpers/openapi.ts, `standaloneCheckerCode`) and provides
 * it to the test files as `openapiCheckerCode`, so that openapi-setup.ts, the setup file of every
 * end-to-end file on every target, neither imports the document and ajv nor compiles a schema.
 * The projects of one vitest process share the one compilation (docs/runtimes.md "One end-to-end
 * suite, four targets", CPU work).
 */
import { standaloneCheckerCode } from "../helpers/openapi.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** The module `standaloneCheckerCode` returns (see above). */
    openapiCheckerCode: string;
  }
}

const cache = globalThis as { esBrokerOpenapiCheckerCode?: string };

/** Vitest calls this with each e2e project. */
export default function setup(project: {
  provide(key: "openapiCheckerCode", value: string): void;
}): void {
  cache.esBrokerOpenapiCheckerCode ??= standaloneCheckerCode();
  project.provide("openapiCheckerCode", cache.esBrokerOpenapiCheckerCode);
}
