/**
 * Avro schemas through the npm `avsc` library: parsing (`Type.forSchema`, which checks names,
 * defaults and duplicate fields), schema resolution for compatibility (`createResolver`, the
 * Avro specification's rules: fields matched by name or reader alias, missing reader fields need
 * a default, int → long → float → double and string ↔ bytes promotions, enum symbols the reader
 * lacks need a reader default, every writer union branch must resolve) and decoding a record
 * value to check it at produce time.
 *
 * avsc is loaded on first need (`libraries.ts`). It decodes Node `Buffer`s (it reads strings with `Buffer.prototype.utf8Slice`); Node, Bun
 * and Deno 2 all provide the `Buffer` global, so a value is wrapped, not copied, with
 * `Buffer.from(arrayBuffer, offset, length)`.
 */
import type avsc from "avsc";
import { errorMessage } from "../lib/errors.ts";
import { avroZeroByteItemsMax, schemaValueDepthMax } from "../lib/limits.ts";
import type { Json } from "./canonical.ts";
import { RegistryError, RegistryErrors } from "./errors.ts";
import { schemaLibraries } from "./libraries.ts";

/** A parsed Avro schema (avsc's type object). */
export type AvroType = avsc.Type;

/** Why a value did not decode: the path of the failing field (`/address/zip`, `/items/3`) and the reason. */
export interface ValueFailure {
  path: string;
  reason: string;
}

const NodeBuffer = (globalThis as { Buffer?: typeof Buffer }).Buffer;

/** Longest error detail of avsc quoted in a message, in characters (its messages can embed whole schemas). */
const detailCharsMax = 300;

function shorten(text: string): string {
  return text.length > detailCharsMax ? `${text.slice(0, detailCharsMax)}…` : text;
}

/** Whether a value that failed as Avro has the marks of a JSON Schema (for a hint in the error). */
function looksLikeJsonSchema(json: Json): boolean {
  if (json === null || typeof json !== "object" || Array.isArray(json)) return false;
  const o = json as Record<string, Json>;
  return "$schema" in o || "properties" in o || o.type === "object" || o.type === "integer";
}

/**
 * Parses an Avro schema from its JSON value.
 * @throws RegistryError invalid_schema (42201) with avsc's reason.
 */
export function parseAvro(json: Json, action: string): AvroType {
  try {
    // A fresh registry per schema: named types of one schema never leak into another.
    return schemaLibraries().avsc.Type.forSchema(json as avsc.Schema, {
      registry: {},
      typeHook: (schema) => (isLongSchema(schema) ? bigIntLong() : undefined),
    });
  } catch (err) {
    throw new RegistryError(
      RegistryErrors.invalidSchema,
      `${action}: not a valid Avro schema: ${shorten(errorMessage(err))}${looksLikeJsonSchema(json) ? ' (it looks like a JSON Schema: register it with schemaType "JSON", CLI --type JSON)' : ""}`,
    );
  }
}

/** `"long"` or `{"type": "long", …}` (a logical type on a long is read as the long here). */
function isLongSchema(schema: unknown): boolean {
  return (
    schema === "long" ||
    (typeof schema === "object" &&
      schema !== null &&
      (schema as { type?: unknown }).type === "long")
  );
}

const longMin = -(2n ** 63n);
const longMax = 2n ** 63n - 1n;
/** Bytes of the longest zigzag varint of a 64-bit long (9 × 7 bits, then one more bit). */
const longVarintBytesMax = 10;

let bigIntLongType: AvroType | null = null;

/**
 * Avro's `long` as a BigInt: every 64-bit value (avsc's own long refuses |v| ≥ 2^53 − 1 as a
 * "potential precision loss", which refused valid records with 64-bit ids or `timestamp-nanos`).
 * It reads the zigzag varint itself (avsc's `noUnpack`), so a varint longer than 10 bytes or
 * past 64 bits is refused rather than wrapped. Defaults are JSON numbers, as the Avro
 * specification writes them.
 */
function bigIntLong(): AvroType {
  bigIntLongType ??= schemaLibraries().avsc.types.LongType.__with(
    {
      fromBuffer: (buf: Buffer): bigint => {
        if (buf.length > longVarintBytesMax || (buf.length === longVarintBytesMax && buf[9] > 1))
          throw new Error(`invalid long: its varint does not fit 64 bits (${buf.length} bytes)`);
        let n = 0n;
        for (let i = buf.length - 1; i >= 0; i--) n = (n << 7n) | BigInt(buf[i] & 0x7f);
        return n & 1n ? -(n >> 1n) - 1n : n >> 1n;
      },
      toBuffer: (value: bigint): Buffer => {
        let n = value < 0n ? ((-value - 1n) << 1n) | 1n : value << 1n;
        const out: number[] = [];
        while (n > 0x7fn) {
          out.push(Number(n & 0x7fn) | 0x80);
          n >>= 7n;
        }
        out.push(Number(n));
        return asBuffer(Uint8Array.from(out));
      },
      // Out of range stays a number, so avsc's refusal can print it (it cannot print a BigInt).
      fromJSON: (value: unknown): unknown => {
        if (typeof value !== "number" || !Number.isInteger(value)) return value;
        const n = BigInt(value);
        return n >= longMin && n <= longMax ? n : value;
      },
      toJSON: (value: bigint): number => Number(value),
      isValid: (value: unknown): boolean =>
        typeof value === "bigint" && value >= longMin && value <= longMax,
      compare: (a: bigint, b: bigint): number => (a === b ? 0 : a < b ? -1 : 1),
    },
    true,
  );
  return bigIntLongType;
}

/**
 * Whether data written with `writer` can be read with `reader` (Avro schema resolution).
 * @returns null when it can, else the reason (e.g. `no matching field for default-less R.f2`).
 */
export function avroReadable(reader: AvroType, writer: AvroType): string | null {
  try {
    reader.createResolver(writer);
    return null;
  } catch (err) {
    return shorten(errorMessage(err));
  }
}

/** `bytes` as a Buffer over the same memory (no copy). */
function asBuffer(bytes: Uint8Array): Buffer {
  if (NodeBuffer === undefined)
    throw new Error("the Buffer global is missing (Node, Bun and Deno 2 have it)");
  return NodeBuffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * A function that checks one Avro binary value against `type`: it must decode completely and
 * use every byte. Returns null when it does, else the failing path and reason. Never throws:
 * a value whose decoding overflows the stack (a recursive schema, deep data) is a failure too.
 */
export function avroValueChecker(type: AvroType): (bytes: Uint8Array) => ValueFailure | null {
  // avsc's decoder believes an array or map block's item count and loops over it, reading past
  // the end: 13 bytes claiming 10^9 items ran the broker out of memory. A schema with blocks is
  // therefore checked by the bounded walk alone, which counts items against the value's bytes.
  // A recursive schema's values nest as deep as the producer likes: its walk counts the levels
  // (schemaValueDepthMax) where avsc's decoder would recurse until the stack ends.
  const blocks = hasBlocks(type, new Set()) || isRecursive(type, new Set());
  return (bytes) => {
    const buf = asBuffer(bytes);
    if (blocks) {
      try {
        const at = walk(type, buf, 0, "", itemBudget(buf));
        if (typeof at !== "number") return at;
        if (at === buf.length) return null;
        return { path: "", reason: `${buf.length - at} bytes left over after the value` };
      } catch (err) {
        return { path: "", reason: `the value does not decode: ${shorten(errorMessage(err))}` };
      }
    }
    try {
      const { offset } = type.decode(buf, 0);
      if (offset === buf.length) return null;
      if (offset > 0)
        return {
          path: "",
          reason: `${buf.length - offset} bytes left over after the value (it decodes from the first ${offset} of ${buf.length} bytes)`,
        };
    } catch {
      // Explained below.
    }
    return explain(type, buf);
  };
}

/** Finds where `buf` stops decoding as `type`: the first field, item or branch that fails. */
function explain(type: AvroType, buf: Buffer): ValueFailure {
  try {
    const at = walk(type, buf, 0, "", itemBudget(buf));
    if (typeof at !== "number") return at;
    if (at !== buf.length)
      return { path: "", reason: `${buf.length - at} bytes left over after the value` };
    return { path: "", reason: "the value does not decode" };
  } catch (err) {
    return { path: "", reason: `the value does not decode: ${shorten(errorMessage(err))}` };
  }
}

let primitives: { long: AvroType; string: AvroType } | null = null;

/** avsc's long and string types, made on first use. */
function primitive(name: "long" | "string"): AvroType {
  primitives ??= {
    long: schemaLibraries().avsc.Type.forSchema("long"),
    string: schemaLibraries().avsc.Type.forSchema("string"),
  };
  return primitives[name];
}

/** Decodes one `type` at `pos`, returning the position after it, or where and why it failed. */
function walk(
  type: AvroType,
  buf: Buffer,
  pos: number,
  path: string,
  budget: ItemBudget,
  depth = 0,
): number | ValueFailure {
  const t = type as AvroType & {
    typeName: string;
    fields?: { name: string; type: AvroType }[];
    itemsType?: AvroType;
    valuesType?: AvroType;
    types?: AvroType[];
    underlyingType?: AvroType;
  };
  const name = t.typeName;
  if (name.startsWith("logical:") && t.underlyingType !== undefined)
    return walk(t.underlyingType, buf, pos, path, budget, depth);
  const nests = name === "record" || name === "error" || name === "array" || name === "map";
  if (nests && depth >= schemaValueDepthMax)
    return {
      path,
      reason: `the value nests records, arrays and maps more than ${schemaValueDepthMax} levels deep (schemaValueDepthMax)`,
    };
  if ((name === "record" || name === "error") && t.fields !== undefined) {
    let at = pos;
    for (const field of t.fields) {
      const next = walk(field.type, buf, at, `${path}/${field.name}`, budget, depth + 1);
      if (typeof next !== "number") return next;
      at = next;
    }
    return at;
  }
  if (name === "array" || name === "map") {
    // Blocks: a count (negative: followed by the block's size in bytes), its items; 0 ends.
    let at = pos;
    let index = 0;
    for (;;) {
      const count = leaf(primitive("long"), buf, at, path);
      if (!("value" in count)) return count;
      at = count.end;
      let items = count.value as number;
      if (items === 0) return at;
      if (items < 0) {
        items = -items;
        const size = leaf(primitive("long"), buf, at, path);
        if (!("value" in size)) return size;
        at = size.end;
      }
      // A count is the client's claim: bound it before looping over it (an item of a zero-byte
      // type, such as null, takes no bytes, so the value's length alone does not bound it).
      budget.items -= items;
      if (budget.items < 0)
        return {
          path,
          reason: `the value claims more array or map items than ${buf.length} bytes can hold (at most the byte count + ${avroZeroByteItemsMax})`,
        };
      for (let i = 0; i < items; i++, index++) {
        let itemPath = `${path}/${index}`;
        if (name === "map") {
          const key = leaf(primitive("string"), buf, at, path);
          if (!("value" in key)) return key;
          at = key.end;
          itemPath = `${path}/${key.value as string}`;
        }
        const next = walk(
          (name === "map" ? t.valuesType : t.itemsType)!,
          buf,
          at,
          itemPath,
          budget,
          depth + 1,
        );
        if (typeof next !== "number") return next;
        at = next;
      }
    }
  }
  if (name.startsWith("union") && t.types !== undefined) {
    const branch = leaf(primitive("long"), buf, pos, path);
    if (!("value" in branch)) return branch;
    const index = branch.value as number;
    if (index < 0 || index >= t.types.length)
      return {
        path,
        reason: `union branch ${index} does not exist (the union has ${t.types.length})`,
      };
    return walk(t.types[index], buf, branch.end, path, budget, depth);
  }
  const decoded = leaf(type, buf, pos, path);
  return "value" in decoded ? decoded.end : decoded;
}

/** Decodes a type at `pos` with avsc: the value and the position after it, or the failure. */
function leaf(
  type: AvroType,
  buf: Buffer,
  pos: number,
  path: string,
): { value: unknown; end: number } | ValueFailure {
  try {
    const { value, offset } = type.decode(buf, pos);
    if (offset < 0)
      return { path, reason: `the value ends inside ${describe(type)} (${buf.length} bytes)` };
    return { value, end: offset };
  } catch (err) {
    return { path, reason: shorten(errorMessage(err)) };
  }
}

function describe(type: AvroType): string {
  const t = type as AvroType & { typeName: string; name?: string };
  return t.name === undefined ? `a ${t.typeName}` : `${t.typeName} ${t.name}`;
}

/** How many more array and map items a value may still claim ({@link walk}). */
interface ItemBudget {
  items: number;
}

/**
 * The items a value of `buf.length` bytes may claim in all: one per byte (an item of any type
 * but a zero-byte one takes at least a byte) plus {@link avroZeroByteItemsMax}.
 */
function itemBudget(buf: Buffer): ItemBudget {
  return { items: buf.length + avroZeroByteItemsMax };
}

/** True if `type` contains itself (a named type used inside its own definition). */
function isRecursive(
  type: AvroType,
  path: Set<AvroType>,
  done: Set<AvroType> = new Set(),
): boolean {
  if (path.has(type)) return true;
  // Explored already without finding a way back: a DAG of named types is walked once per node.
  if (done.has(type)) return false;
  const t = type as AvroType & {
    fields?: { type: AvroType }[];
    types?: AvroType[];
    itemsType?: AvroType;
    valuesType?: AvroType;
    underlyingType?: AvroType;
  };
  const children = [
    ...(t.fields?.map((f) => f.type) ?? []),
    ...(t.types ?? []),
    ...[t.itemsType, t.valuesType, t.underlyingType].filter((c) => c !== undefined),
  ];
  path.add(type);
  const found = children.some((c) => isRecursive(c, path, done));
  path.delete(type);
  done.add(type);
  return found;
}

/** True if `type` has an array or a map anywhere inside it. */
function hasBlocks(type: AvroType, seen: Set<AvroType>): boolean {
  if (seen.has(type)) return false;
  seen.add(type);
  const t = type as AvroType & {
    typeName: string;
    fields?: { type: AvroType }[];
    types?: AvroType[];
    underlyingType?: AvroType;
  };
  if (t.typeName === "array" || t.typeName === "map") return true;
  if (t.underlyingType !== undefined && hasBlocks(t.underlyingType, seen)) return true;
  if (t.fields?.some((f) => hasBlocks(f.type, seen))) return true;
  return t.types?.some((b) => hasBlocks(b, seen)) ?? false;
}
