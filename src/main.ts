#!/usr/bin/env node
/** Entry point of the `es-broker` command (bundled to dist/es-broker.mjs; run from source by Deno and Bun). */
import { main } from "./cli/main.ts";
import { installFastCrc32 } from "./runtime/crc.ts";
import { errorMessage } from "./lib/errors.ts";

installFastCrc32();

main(process.argv.slice(2)).then(
  (code) => {
    if (code !== undefined) process.exitCode = code;
  },
  (err: unknown) => {
    process.stderr.write(`es-broker: ${errorMessage(err)}\n`);
    process.exitCode = 1;
  },
);
