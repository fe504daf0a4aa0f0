// CRC-32 on this runtime: native `zlib.crc32` against the npm `crc-32` package, on 256-byte and
// 64 KiB buffers (a small record and a large batch), plus 64 B and 1 KiB to place the crossover
// where there is one (Node). Runs unchanged on Node, Deno and Bun:
//
//   node bench/crc32.mjs            deno run -A bench/crc32.mjs            bun bench/crc32.mjs
//
// Prints one JSON line per (implementation, size) with ns per call and GB/s, best of 5 rounds.
// `src/runtime/crc.ts` chooses per runtime from these numbers; docs/runtimes.md records them.
// Add `--quick` for a smoke run (CI), which still checks that both give the same values.
import * as zlib from "node:zlib";
import * as CRC32 from "crc-32";

const quick = process.argv.includes("--quick");
const crcModule = typeof CRC32.buf === "function" ? CRC32 : CRC32.default;
const runtime = globalThis.Deno
  ? `deno ${Deno.version.deno}`
  : globalThis.Bun
    ? `bun ${Bun.version}`
    : `node ${process.versions.node}`;
const impls = {
  "zlib.crc32": typeof zlib.crc32 === "function" ? (b) => zlib.crc32(b) >>> 0 : null,
  "crc-32": (b) => crcModule.buf(b, 0) >>> 0,
};

const check = new TextEncoder().encode("123456789");
for (const [name, fn] of Object.entries(impls)) {
  if (fn && fn(check) !== 0xcbf43926)
    throw new Error(`${name} gives 0x${fn(check).toString(16)} for "123456789"`);
}

for (const sizeBytes of [64, 256, 1024, 64 * 1024]) {
  // Many distinct buffers, so no implementation profits from one hot cache line.
  const buffers = Array.from({ length: 64 }, (_, i) => {
    const b = new Uint8Array(sizeBytes);
    for (let j = 0; j < b.length; j++) b[j] = (i * 31 + j * 7) & 0xff;
    return b;
  });
  const a = impls["zlib.crc32"];
  if (a)
    for (const b of buffers)
      if (a(b) !== impls["crc-32"](b))
        throw new Error(`zlib.crc32 and crc-32 differ on ${sizeBytes} bytes`);
  const totalBytes = quick ? 1 << 20 : 256 << 20; // per round
  const calls = Math.max(64, Math.floor(totalBytes / sizeBytes));
  for (const [name, fn] of Object.entries(impls)) {
    if (!fn) {
      console.log(JSON.stringify({ runtime, impl: name, size_bytes: sizeBytes, available: false }));
      continue;
    }
    let best = Infinity;
    let sink = 0;
    for (let round = 0; round < (quick ? 1 : 5); round++) {
      const t0 = performance.now();
      for (let i = 0; i < calls; i++) sink ^= fn(buffers[i & 63]);
      best = Math.min(best, performance.now() - t0);
    }
    const nsPerCall = (best * 1e6) / calls;
    console.log(
      JSON.stringify({
        runtime,
        impl: name,
        size_bytes: sizeBytes,
        ns_per_call: +nsPerCall.toFixed(1),
        gb_per_s: +(sizeBytes / nsPerCall).toFixed(2),
        sink: sink & 1,
      }),
    );
  }
}
