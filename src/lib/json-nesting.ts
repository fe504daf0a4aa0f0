/**
 * The nesting limit on a client's JSON ({@link jsonNestingDepthMax}), checked on the text before
 * it is parsed: `JSON.parse` itself copes with any depth on Node, Deno and Bun, but everything
 * after it that walks the value (`JSON.stringify`, a message quoting it, a deep copy) recurses,
 * and 5,000 levels (10 KB of `[`) overflow the stack. One linear pass, no recursion, no
 * allocation beyond one frame per open level (at most the limit). The same pass can count the
 * elements of arrays and the members of objects ({@link jsonShapeFault}), so a body of millions of
 * tiny elements or fields is refused before `JSON.parse` builds them.
 */
import { jsonNestingDepthMax } from "./limits.ts";
import { clip } from "./quote.ts";

/** Keys and indices from the outermost value inwards: `["config", "retention_ms", 0]`. */
export type JsonPath = (string | number)[];

/** Where a JSON text first nests past the limit. */
export interface JsonNestingFault {
  /** The path of the first array or object opened past the limit (its enclosing keys and indices, outermost first). */
  path: JsonPath;
  /** The limit that was passed. */
  depthMax: number;
}

interface Frame {
  isObject: boolean;
  /** Index of the current element (arrays). */
  index: number;
  /** Position of the current key's opening quote, and one past its closing quote (objects); -1 before the first. */
  keyStart: number;
  keyEnd: number;
  /** True between `{` or `,` and the next key (objects). */
  expectKey: boolean;
}

/** Where a JSON text first holds more elements in one array than a limit allows. */
export interface JsonElementsFault {
  /** The path of that array (its enclosing keys and indices, outermost first; `[]` for the outermost value). */
  path: JsonPath;
  /** The limit that was passed: the array holds at least one element more. */
  elementsMax: number;
}

/** Where a JSON text's objects first hold more members, all together, than a limit allows. */
export interface JsonMembersFault {
  /** The path of the object whose member passed the limit (its enclosing keys and indices, outermost first; `[]` for the outermost value). */
  path: JsonPath;
  /** The limit that was passed: the text's objects hold at least one member more. */
  membersMax: number;
}

/** The limits {@link jsonShapeFault} checks. */
export interface JsonShapeLimits {
  /** Most levels arrays and objects may nest (default {@link jsonNestingDepthMax}). */
  depthMax?: number;
  /** Most elements one array may hold (default: no limit). */
  elementsMax?: number;
  /**
   * Most members all objects of the text may hold together, not each (default: no limit): what
   * `JSON.parse` spends on a key grows with the distinct keys, and a limit on each object alone
   * lets them be spread over many objects.
   */
  membersMax?: number;
}

/**
 * Scans `text` (JSON, possibly malformed: then `JSON.parse` reports it afterwards) and returns
 * null if its arrays and objects nest at most `depthMax` levels, else where it first goes deeper.
 */
export function jsonNestingFault(
  text: string,
  depthMax: number = jsonNestingDepthMax,
): JsonNestingFault | null {
  const fault = jsonShapeFault(text, { depthMax });
  return fault === null || "depthMax" in fault ? fault : null;
}

/**
 * {@link jsonNestingFault}, the number of elements of each array (`limits.elementsMax`) and the
 * number of members of all objects together (`limits.membersMax`), in the same pass: the first
 * fault found, or null. An array is found to hold more than `elementsMax` elements at its
 * `elementsMax`-th comma, and the objects more than `membersMax` members at the key of member
 * `membersMax + 1`, so the scan stops there: a body of millions of elements or fields costs the
 * scan of the first ones, and `JSON.parse` never builds it (docs/decisions.md §19).
 */
export function jsonShapeFault(
  text: string,
  limits: JsonShapeLimits,
): JsonNestingFault | JsonElementsFault | JsonMembersFault | null {
  const depthMax = limits.depthMax ?? jsonNestingDepthMax;
  const elementsMax = limits.elementsMax ?? Number.POSITIVE_INFINITY;
  const membersMax = limits.membersMax ?? Number.POSITIVE_INFINITY;
  let members = 0;
  const frames: Frame[] = [];
  let inString = false;
  let stringStart = -1;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // backslash: skip the escaped character
      else if (c === 0x22) {
        inString = false;
        const top = frames.at(-1);
        if (top?.isObject && top.expectKey) {
          // A key: one member (counted here, not at commas, so one-member objects count too).
          if (++members > membersMax)
            return { path: pathOf(text, frames.slice(0, -1)), membersMax };
          top.keyStart = stringStart;
          top.keyEnd = i + 1;
          top.expectKey = false;
        }
      }
      continue;
    }
    switch (c) {
      case 0x22: // "
        inString = true;
        stringStart = i;
        break;
      case 0x5b: // [
      case 0x7b: // {
        if (frames.length >= depthMax) return { path: pathOf(text, frames), depthMax };
        frames.push({ isObject: c === 0x7b, index: 0, keyStart: -1, keyEnd: -1, expectKey: true });
        break;
      case 0x5d: // ]
      case 0x7d: // }
        frames.pop();
        break;
      case 0x2c: {
        // ,
        const top = frames.at(-1);
        if (top === undefined) break;
        if (top.isObject) top.expectKey = true;
        else if (++top.index >= elementsMax)
          return { path: pathOf(text, frames.slice(0, -1)), elementsMax };
        break;
      }
    }
  }
  return null;
}

function pathOf(text: string, frames: readonly Frame[]): JsonPath {
  return frames.map((f) => (f.isObject ? keyOf(text, f) : f.index));
}

/** The decoded key of an object frame (clipped), or "" before its first key. */
function keyOf(text: string, frame: Frame): string {
  if (frame.keyStart < 0) return "";
  const raw = text.slice(frame.keyStart, Math.min(frame.keyEnd, frame.keyStart + 4096));
  try {
    const key: unknown = JSON.parse(raw);
    return typeof key === "string" ? clip(key) : clip(raw);
  } catch {
    return clip(raw.slice(1, -1));
  }
}

/** Segments of a path shown by {@link formatJsonPath} before "…". */
const shownSegmentsMax = 4;

/**
 * A path as a field name for messages: `config.retention_ms[0][0]…` (object keys after dots,
 * array indices in brackets, at most four segments, "…" when longer); `(body)` for the empty path.
 */
export function formatJsonPath(path: JsonPath): string {
  let text = "";
  for (const [i, segment] of path.slice(0, shownSegmentsMax).entries()) {
    if (typeof segment === "number") text += `[${segment}]`;
    else text += i === 0 ? segment : `.${segment}`;
  }
  if (path.length > shownSegmentsMax) text += "…";
  return text === "" ? "(body)" : text;
}
