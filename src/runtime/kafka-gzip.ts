/**
 * gzip inflation for the Kafka listener's compressed record batches (`protocol/kafka/compression.ts`)
 * through `node:zlib`, which Node, Deno and Bun all provide. `maxOutputLength` makes zlib stop
 * once the output would pass the limit, so a small batch cannot inflate into a large allocation.
 */
import * as zlib from "node:zlib";
import { DecompressError, type Gunzip } from "../protocol/kafka/compression.ts";

/** Inflates gzip into at most `maxBytes`. @throws DecompressError (too large or corrupt). */
export const nodeGunzip: Gunzip = (input, maxBytes) => {
  try {
    const out = zlib.gunzipSync(input, { maxOutputLength: Math.max(1, maxBytes) });
    if (out.length > maxBytes)
      throw new DecompressError(`gzip data inflates past ${maxBytes} bytes`, true);
    return out;
  } catch (err) {
    if (err instanceof DecompressError) throw err;
    const code = (err as { code?: string }).code;
    if (err instanceof RangeError || code === "ERR_BUFFER_TOO_LARGE")
      throw new DecompressError(`gzip data inflates past ${maxBytes} bytes`, true);
    throw new DecompressError(`gzip data is corrupt: ${(err as Error).message}`, false);
  }
};
