/**
 * The schema libraries (npm `avsc`, `ajv` with its 2020-12 build, `ajv-formats`, and `re2js`, the
 * linear-time regular expressions JSON Schema patterns run on), loaded on first
 * need rather than at start: together they take about as long to evaluate as the rest of the
 * broker, and a broker (or a CLI command) that never touches a schema should not pay for them.
 * {@link loadSchemaLibraries} loads them (a dynamic import: in the esbuild bundle and the compiled
 * binary the modules are inside, evaluated only then); {@link schemaLibraries} hands them to the
 * synchronous code once loaded. The registry loads them before it parses a schema, and at open
 * when its file holds any, so every schema in its state can be compiled synchronously.
 */
import type avscModule from "avsc";
import type { Ajv } from "ajv";
import type { RE2JS } from "re2js";

/** The loaded libraries. */
export interface SchemaLibraries {
  avsc: typeof avscModule;
  /** The draft-07 Ajv class. */
  Ajv: typeof Ajv;
  /** The 2020-12 Ajv class (same instance API). */
  Ajv2020: typeof Ajv;
  /** ajv-formats' plugin: adds the standard formats to an instance. */
  addFormats: (ajv: Ajv) => void;
  /** re2js's compiler: RE2 syntax, matching in time linear in the input. */
  RE2JS: typeof RE2JS;
}

let loaded: SchemaLibraries | null = null;
let loading: Promise<SchemaLibraries> | null = null;

/** Loads the libraries once; later calls resolve at once. */
export function loadSchemaLibraries(): Promise<SchemaLibraries> {
  if (loaded !== null) return Promise.resolve(loaded);
  loading ??= (async () => {
    const [avsc, ajv, ajv2020, formats, re2js] = await Promise.all([
      import("avsc"),
      import("ajv"),
      import("ajv/dist/2020.js"),
      import("ajv-formats"),
      import("re2js"),
    ]);
    // CommonJS modules arrive as a namespace whose default is module.exports (Node, Deno, Bun,
    // esbuild); ajv's classes are also named exports.
    const formatsDefault = formats.default as unknown as
      | ((ajv: Ajv) => void)
      | { default: (ajv: Ajv) => void };
    loaded = {
      avsc: (avsc.default ?? avsc) as typeof avscModule,
      Ajv: ajv.Ajv,
      Ajv2020: ajv2020.Ajv2020 as unknown as typeof Ajv,
      addFormats: typeof formatsDefault === "function" ? formatsDefault : formatsDefault.default,
      RE2JS: re2js.RE2JS,
    };
    return loaded;
  })();
  return loading;
}

/**
 * The libraries, once {@link loadSchemaLibraries} has resolved.
 * @throws Error if they were not loaded: a bug (the registry loads them before any schema exists).
 */
export function schemaLibraries(): SchemaLibraries {
  if (loaded === null) throw new Error("schema libraries used before loadSchemaLibraries()");
  return loaded;
}
