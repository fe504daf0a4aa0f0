/**
 * Every rule the code cites lives in the repository: no source or test file cites a document
 * outside it (the old numbered decisions list, the storage spec, design notes), every `docs/<doc>.md "Title"` names
 * a heading that exists in that doc, and every `docs/decisions.md §n` a ruling that exists.
 * `node scripts/cite-docs.mjs` rewrites old-style citations into this form.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { describe, expect, it } from "vitest";

const root = new URL("../..", import.meta.url).pathname;
const self = relative(root, new URL(import.meta.url).pathname);

function* sources(dir: string): Generator<string> {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) yield* sources(path);
    else if (/\.(ts|mjs)$/.test(name)) yield path;
  }
}

/** Every source and test file, with its text and the line a character position is on. */
const files = ["src", "test"].flatMap((dir) =>
  [...sources(join(root, dir))]
    .map((path) => ({ path: relative(root, path), text: readFileSync(path, "utf8") }))
    .filter((f) => f.path !== self),
);
const docFiles = readdirSync(join(root, "docs"))
  .filter((n) => n.endsWith(".md"))
  .map((n) => ({ path: `docs/${n}`, text: readFileSync(join(root, "docs", n), "utf8") }));

const lineOf = (text: string, index: number) => text.slice(0, index).split("\n").length;

/** Headings of a doc, without their `#` marks. */
function headings(doc: string): Set<string> {
  const text = readFileSync(join(root, doc), "utf8");
  return new Set(
    text
      .split("\n")
      .filter((l) => /^#{1,6} /.test(l))
      .map((l) => l.replace(/^#+ /, "").trim()),
  );
}

/** Citations of places outside the repository (built from parts so this file does not match itself). */
const outside: { what: string; re: RegExp }[] = [
  { what: "the decisions list outside the repo", re: new RegExp(`\\b${"DECISIONS"}\\b`) },
  { what: "the storage spec outside the repo", re: new RegExp(`\\b${"spec"}:`) },
  { what: "the shared folder", re: new RegExp(`/work/${"shared"}|\\b${"seed"}/\\d`) },
  { what: "a team note outside the repo", re: /\b(?:DESIGN|PLATFORM|STYLE)\.md\b/ },
  { what: "the field-failures notes", re: new RegExp(`field-${"failures"}`) },
];

describe("citations in src/ and test/", () => {
  it("cite no document outside the repository", () => {
    const bad: string[] = [];
    for (const f of [...files, ...docFiles]) {
      f.text.split("\n").forEach((line, i) => {
        for (const o of outside)
          if (o.re.test(line)) bad.push(`${f.path}:${i + 1}: ${o.what}: ${line.trim()}`);
      });
    }
    expect(bad, "run `node scripts/cite-docs.mjs`, or cite docs/ instead").toEqual([]);
  });

  it("name only Markdown files that exist in the repository", () => {
    const bad: string[] = [];
    for (const f of files) {
      for (const m of f.text.matchAll(/(?<![\w$}/.-])((?:[\w.-]+\/)*[\w-]+\.md)\b/g)) {
        const name = m[1];
        const candidates = [
          join(root, name),
          join(root, "docs", name),
          join(root, dirname(f.path), name),
        ];
        if (!candidates.some((c) => existsSync(c)))
          bad.push(`${f.path}:${lineOf(f.text, m.index)}: ${name}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it('cite sections (docs/<doc>.md "Title") that exist as headings of that doc', () => {
    const bad: string[] = [];
    let count = 0;
    const cache = new Map<string, Set<string>>();
    for (const f of files) {
      // The quoted title may start on the next comment line.
      for (const m of f.text.matchAll(
        /\b(docs\/[\w-]+\.md)(?:[ \t]+|[ \t]*\n[ \t]*(?:\*|\/\/)[ \t]*)"([^"\n]+)"/g,
      )) {
        count++;
        const [, doc, title] = m;
        if (!existsSync(join(root, doc))) {
          bad.push(`${f.path}:${lineOf(f.text, m.index)}: ${doc} does not exist`);
          continue;
        }
        if (!cache.has(doc)) cache.set(doc, headings(doc));
        if (!cache.get(doc)!.has(title))
          bad.push(`${f.path}:${lineOf(f.text, m.index)}: ${doc} has no section "${title}"`);
      }
    }
    expect(bad).toEqual([]);
    expect(count, "the code cites docs/storage.md's sections").toBeGreaterThan(20);
  });

  it("cite rulings (docs/decisions.md §n) that exist", () => {
    const rulings = new Set(
      [...readFileSync(join(root, "docs/decisions.md"), "utf8").matchAll(/^## (\d+)\. /gm)].map(
        (m) => Number(m[1]),
      ),
    );
    const bad: string[] = [];
    let count = 0;
    for (const f of files) {
      for (const m of f.text.matchAll(/docs\/decisions\.md §(\d+)((?:(?:, | and )§\d+)*)/g)) {
        for (const n of [m[1], ...[...m[2].matchAll(/§(\d+)/g)].map((x) => x[1])]) {
          count++;
          if (!rulings.has(Number(n)))
            bad.push(`${f.path}:${lineOf(f.text, m.index)}: docs/decisions.md has no §${n}`);
        }
      }
    }
    expect(bad).toEqual([]);
    expect(count, "the code cites docs/decisions.md").toBeGreaterThan(40);
  });
});

describe("docs/decisions.md", () => {
  it("numbers its rulings 1, 2, 3, … without gaps or repeats", () => {
    const numbers = [
      ...readFileSync(join(root, "docs/decisions.md"), "utf8").matchAll(/^## (\d+)\. /gm),
    ].map((m) => Number(m[1]));
    expect(numbers.length).toBeGreaterThanOrEqual(12);
    expect(numbers).toEqual(numbers.map((_, i) => i + 1));
  });
});
