// Summarizes V8 CPU profiles (.cpuprofile, as written by `node --cpu-prof`; the harness's
// `--cpu-prof DIR` profiles the broker) into the functions with the most self time:
//   node bench/profile-top.mjs DIR_OR_FILE [--top N]
// Prints, per profile: total sampled time, idle share, then `self ms  self %  function  file:line`.
// `--callers NAME` also splits the self time of every function called NAME by its call path
// (three frames up), e.g. to tell socket writes from file writes under `writeBuffer`.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { parseArgs } from "node:util";

const { values, positionals } = parseArgs({
  options: { top: { type: "string", default: "25" }, callers: { type: "string" } },
  allowPositionals: true,
});
const top = Number(values.top);
const target = positionals[0];
if (!target) {
  process.stderr.write("usage: node bench/profile-top.mjs DIR_OR_FILE [--top N]\n");
  process.exit(2);
}
const files = statSync(target).isDirectory()
  ? readdirSync(target)
      .filter((f) => f.endsWith(".cpuprofile"))
      .map((f) => join(target, f))
  : [target];

for (const file of files) {
  const profile = JSON.parse(readFileSync(file, "utf8"));
  const nodes = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const dt = profile.timeDeltas[i] ?? 0;
    total += dt;
    const frame = nodes.get(id).callFrame;
    const where = frame.url ? `${basename(frame.url)}:${frame.lineNumber + 1}` : "";
    const key = `${frame.functionName || "(anonymous)"}\t${where}`;
    self.set(key, (self.get(key) ?? 0) + dt);
  });
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const name = (id) => {
    const f = nodes.get(id).callFrame;
    return `${f.functionName || "(anonymous)"}${f.url ? `@${basename(f.url)}:${f.lineNumber + 1}` : ""}`;
  };
  const byCaller = new Map();
  if (values.callers) {
    profile.samples.forEach((id, i) => {
      if (nodes.get(id).callFrame.functionName !== values.callers) return;
      const path = [];
      for (let p = parent.get(id), k = 0; p !== undefined && k < 3; p = parent.get(p), k++)
        path.push(name(p));
      const key = path.join(" < ");
      byCaller.set(key, (byCaller.get(key) ?? 0) + (profile.timeDeltas[i] ?? 0));
    });
  }
  const idle = self.get("(idle)\t") ?? 0;
  const busy = total - idle;
  process.stdout.write(
    `${file}\n  sampled ${(total / 1000).toFixed(0)} ms, busy ${(busy / 1000).toFixed(0)} ms (${((100 * busy) / total).toFixed(1)} %)\n`,
  );
  process.stdout.write(`  ${"self ms".padStart(9)} ${"% busy".padStart(7)}  function\n`);
  for (const [key, dt] of [...self]
    .filter(([k]) => !k.startsWith("(idle)"))
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)) {
    const [fn, where] = key.split("\t");
    process.stdout.write(
      `  ${(dt / 1000).toFixed(1).padStart(9)} ${((100 * dt) / busy).toFixed(1).padStart(7)}  ${fn}  ${where}\n`,
    );
  }
  if (values.callers) {
    process.stdout.write(`  callers of ${values.callers}:\n`);
    for (const [key, dt] of [...byCaller].sort((a, b) => b[1] - a[1]).slice(0, top)) {
      process.stdout.write(
        `  ${(dt / 1000).toFixed(1).padStart(9)} ${((100 * dt) / busy).toFixed(1).padStart(7)}  ${key}\n`,
      );
    }
  }
}
