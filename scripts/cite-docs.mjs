#!/usr/bin/env node
// Rewrites citations of documents that live outside the repository into citations of the docs that
// live in it, across src/ and test/ (and .ts/.mjs files only):
//
//   DECISIONS 4            → docs/decisions.md §4       (DECISIONS 1, 2 and 11 → §1, §2 and §11)
//   DECISIONS.md           → docs/decisions.md
//   spec: Records          → docs/storage.md "Records"  (a title split over two comment lines too:
//                            the line break then stands between the file and the quoted title)
//   spec: A — B            → docs/storage.md "B"        when B is a subsection title of storage.md
//   spec: A, B / spec: A; B → docs/storage.md "A", docs/storage.md "B" / … "A"; docs/storage.md "B"
//   DESIGN.md              → docs/architecture.md ;  PLATFORM.md → docs/runtimes.md
//
// Section titles are the headings of docs/storage.md as they are now. A `spec:` citation naming no
// heading is left alone and listed, and the script exits 1, so a missing section is noticed
// (test/unit/doc-citations.test.ts fails on it too). Idempotent: a second run changes nothing.
// Usage: node scripts/cite-docs.mjs [--check]   (--check: change nothing, exit 1 if a file would change)
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

const root = new URL("..", import.meta.url).pathname;
const check = process.argv.includes("--check");

const titles = readFileSync(join(root, "docs/storage.md"), "utf8")
  .split("\n")
  .filter((l) => /^#{2,4} /.test(l))
  .map((l) => l.replace(/^#+ /, "").trim())
  .sort((a, b) => b.length - a.length); // longest first: "Retention and compaction" before "Retention"

/** A regex source matching `title` with any of its spaces possibly a line break inside a comment. */
function flexible(title) {
  const gap = String.raw`(?:[ \t]+|[ \t]*\n[ \t]*(?:\*|//)[ \t]*)`;
  return title
    .split(" ")
    .map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"))
    .join(gap);
}
const titleSource = `(${titles.map(flexible).join("|")})`;
const sep = String.raw`(?:[ \t]+|[ \t]*\n[ \t]*(?:\*|//)[ \t]*)`;
const specRe = new RegExp(
  String.raw`spec:${sep}${titleSource}(?:${sep}—${sep}${titleSource})?`,
  "g",
);
const listRe = new RegExp(
  String.raw`(docs/storage\.md${sep}"[^"]+")([,;])${sep}${titleSource}(?![\w-])`,
  "g",
);
const oneLine = (s) => s.replace(/[ \t]*\n[ \t]*(?:\*|\/\/)[ \t]*/g, " ").replace(/[ \t]+/g, " ");

/**
 * The citation of `title` as matched: on one line, or, when the source broke the title over two
 * comment lines, with that line break between the file and the quoted title, so lines keep about
 * their length.
 */
function cite(matched) {
  const brk = /[ \t]*\n[ \t]*(?:\*|\/\/)[ \t]*/.exec(matched);
  return `docs/storage.md${brk === null ? " " : brk[0].replace(/^[ \t]*/, "")}"${oneLine(matched)}"`;
}

/** The rewritten text of one file, and the `spec:` citations it could not resolve. */
export function rewrite(text) {
  let out = text.replace(specRe, (_m, title, sub) => cite(sub ?? title));
  for (let again = true; again; ) {
    again = false;
    out = out.replace(listRe, (_m, first, mark, title) => {
      again = true;
      return `${first}${mark} ${cite(title)}`;
    });
  }
  out = out.replace(
    /DECISIONS (\d+)((?:(?:, | and )\d+)*)/g,
    (_m, first, more) => `docs/decisions.md §${first}${more.replace(/(, | and )(\d+)/g, "$1§$2")}`,
  );
  out = out.replace(/(?<![\w/])DECISIONS\.md\b/g, "docs/decisions.md");
  out = out.replace(/(?<![\w/])DESIGN\.md\b/g, "docs/architecture.md");
  out = out.replace(/(?<![\w/])PLATFORM\.md\b/g, "docs/runtimes.md");
  const unresolved = [...out.matchAll(/spec:[ \t]*([^\n)]{0,60})/g)].map((m) => m[0]);
  return { text: out, unresolved };
}

function* files(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (name === "node_modules") continue;
    if (statSync(path).isDirectory()) yield* files(path);
    else if (/\.(ts|mjs)$/.test(name)) yield path;
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  let changed = 0;
  const unresolved = [];
  for (const dir of ["src", "test"]) {
    for (const path of files(join(root, dir))) {
      const before = readFileSync(path, "utf8");
      const after = rewrite(before);
      for (const u of after.unresolved) unresolved.push(`${relative(root, path)}: ${u}`);
      if (after.text === before) continue;
      changed++;
      if (check) console.log(`would change ${relative(root, path)}`);
      else writeFileSync(path, after.text);
    }
  }
  console.log(`${check ? "would change" : "changed"} ${changed} file(s)`);
  if (unresolved.length > 0) {
    console.log(`citations of no section of docs/storage.md:\n  ${unresolved.join("\n  ")}`);
    process.exit(1);
  }
  if (check && changed > 0) process.exit(1);
}
