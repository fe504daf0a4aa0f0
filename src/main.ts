#!/usr/bin/env node
/** Entry point of the `es-broker` command (bundled to dist/es-broker.mjs; run from source by Deno and Bun). */
import { main } from "./cli/main.ts";
import { installFastCrc32 } from "./runtime/crc.ts";
import { errorMessage } from "./lib/errors.ts";

installFastCrc32();

/**
 * Once the command is over, the process ends: a connection a failed command left open (a broker
 * that accepts and never answers keeps its socket) must not keep it alive. Output written by then
 * is flushed first; the grace only matters when something is still open.
 */
const exitGraceMs = 1000;

function finish(code: number): void {
  process.exitCode = code;
  setTimeout(() => process.exit(code), exitGraceMs).unref?.();
}

main(process.argv.slice(2)).then(
  (code) => finish(code ?? 0),
  (err: unknown) => {
    process.stderr.write(`es-broker: ${errorMessage(err)}\n`);
    finish(1);
  },
);
