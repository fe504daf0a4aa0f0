/**
 * Decoding of HTTP produce bodies into an entry batch (`src/storage/record.ts`) plus partitions.
 * Every record is checked before the broker is called, so a request with one bad record appends
 * nothing; the error names the record index and the field.
 *
 * JSON (`Content-Type: application/json`):
 *
 * ```
 * { "records": [ { "key"?: string|null, "key_b64"?: string|null,
 *                  "value"?: string,     "value_b64"?: string,
 *                  "partition"?: integer ≥ 0 | null, "timestamp"?: integer ≥ 0 | −1 | null } ] }
 * ```
 *
 * | field              | rule                                                                       |
 * |--------------------|----------------------------------------------------------------------------|
 * | key / key_b64      | at most one of them; absent or null = no key; "" = the empty key (a real key, docs/decisions.md §12) |
 * | value / value_b64  | exactly one of them; "" = an empty value (a tombstone for compaction)      |
 * | *_b64              | strict RFC 4648 base64 (`src/lib/base64.ts`)                                |
 * | key, value         | UTF-8 of the string; lone surrogates are refused rather than replaced       |
 * | partition          | absent or null = the broker picks (murmur2 of the key, or round-robin)     |
 * | timestamp          | ms since the epoch; absent, null or −1 = the broker's clock                |
 * | any other field    | refused, so a typo (`"kye"`) never silently drops data                     |
 *
 * NDJSON (`Content-Type: application/x-ndjson`): one record per line, the value being the line's
 * bytes verbatim (not parsed, not required to be JSON). A line ends at LF; one CR before the LF is
 * dropped, so CRLF files work. Empty lines (including the one after a final trailing newline) are
 * skipped and make no record. `?key=K` (UTF-8; `?key=` is the empty key) and `?partition=N`
 * apply to every record.
 */
import { BrokerError, Errors } from "../../broker/errors.ts";
import type { EntryBatch } from "../../storage/record.ts";
import { entryOverheadBytes, EntryBatchBuilder } from "../../storage/record.ts";
import { Base64Error, decodeBase64 } from "../../lib/base64.ts";
import { utf8 } from "../../lib/bytes.ts";
import {
  httpProduceMembersMax,
  httpProduceRecordsMax,
  recordPayloadBytesMax,
} from "../../lib/limits.ts";
import { clip, quote } from "../../lib/quote.ts";
import { invalidRequest } from "./errors.ts";

/** Largest partition number a client may name (it must fit the Int32Array of `ProduceRequest.partitions`). */
export const partitionNumberMax = 0x7fff_ffff;

/** A produce body decoded into the shape of `ProduceRequest` (minus `topic`). */
export interface DecodedProduce {
  batch: EntryBatch;
  /** Set when every record goes to the same named partition. */
  partition?: number;
  /** Set when records name different partitions (or some name one and some do not); −1 = broker picks. */
  partitions?: Int32Array;
}

const recordFields = new Set(["key", "key_b64", "value", "value_b64", "partition", "timestamp"]);
const loneSurrogate = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Collects per-record partitions, keeping the common "all the same" case as one number. */
export class PartitionChoice {
  #partitions: Int32Array | null = null;
  #uniform: number | undefined;
  #count = 0;

  /** Notes record `index`'s partition (−1 = broker picks). Records must be added in order. */
  add(index: number, partition: number): void {
    if (index === 0) this.#uniform = partition;
    else if (this.#partitions === null && partition !== this.#uniform) {
      this.#partitions = new Int32Array(Math.max(16, index * 2)).fill(this.#uniform ?? -1);
    }
    if (this.#partitions !== null) {
      if (index >= this.#partitions.length) {
        const grown = new Int32Array(this.#partitions.length * 2);
        grown.set(this.#partitions);
        this.#partitions = grown;
      }
      this.#partitions[index] = partition;
    }
    this.#count = index + 1;
  }

  /** The `partition` / `partitions` fields of the request. */
  result(): { partition?: number; partitions?: Int32Array } {
    if (this.#partitions !== null) return { partitions: this.#partitions.slice(0, this.#count) };
    if (this.#uniform !== undefined && this.#uniform >= 0) return { partition: this.#uniform };
    return {};
  }
}

function textBytes(text: string, action: string, field: string, index: number): Uint8Array {
  if (loneSurrogate.test(text)) {
    throw invalidRequest(
      action,
      `records[${index}].${field} is not valid Unicode: it holds a lone surrogate (send bytes with ${field}_b64)`,
      { record: index, field },
    );
  }
  return utf8(text);
}

function base64Bytes(text: string, action: string, field: string, index: number): Uint8Array {
  try {
    return decodeBase64(text);
  } catch (e) {
    if (!(e instanceof Base64Error)) throw e;
    throw invalidRequest(action, `records[${index}].${field} is not strict base64: ${e.message}`, {
      record: index,
      field,
    });
  }
}

/** The record's key: null for none. Refuses both `key` and `key_b64`, and wrong types. */
function recordKey(
  record: Record<string, unknown>,
  action: string,
  index: number,
): Uint8Array | null {
  const hasText = "key" in record;
  const hasBase64 = "key_b64" in record;
  if (hasText && hasBase64) {
    throw invalidRequest(action, `records[${index}] has both key and key_b64: give at most one`, {
      record: index,
      field: "key_b64",
    });
  }
  if (hasBase64) {
    const value = record.key_b64;
    if (value === null) return null;
    if (typeof value !== "string") {
      throw invalidRequest(action, `records[${index}].key_b64 must be a base64 string or null`, {
        record: index,
        field: "key_b64",
      });
    }
    return base64Bytes(value, action, "key_b64", index);
  }
  const value = record.key;
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") {
    throw invalidRequest(action, `records[${index}].key must be a string or null`, {
      record: index,
      field: "key",
    });
  }
  return textBytes(value, action, "key", index);
}

/** The record's value. Exactly one of `value` and `value_b64`, as a string. */
function recordValue(record: Record<string, unknown>, action: string, index: number): Uint8Array {
  const hasText = "value" in record;
  const hasBase64 = "value_b64" in record;
  if (hasText && hasBase64) {
    throw invalidRequest(
      action,
      `records[${index}] has both value and value_b64: give exactly one`,
      { record: index, field: "value_b64" },
    );
  }
  if (hasBase64) {
    const value = record.value_b64;
    if (typeof value !== "string") {
      throw invalidRequest(action, `records[${index}].value_b64 must be a base64 string`, {
        record: index,
        field: "value_b64",
      });
    }
    return base64Bytes(value, action, "value_b64", index);
  }
  if (!hasText) {
    throw invalidRequest(action, `records[${index}] has no value: give value or value_b64`, {
      record: index,
      field: "value",
    });
  }
  const value = record.value;
  if (typeof value !== "string") {
    throw invalidRequest(
      action,
      `records[${index}].value must be a string ("" for an empty value)`,
      { record: index, field: "value" },
    );
  }
  return textBytes(value, action, "value", index);
}

function recordPartition(record: Record<string, unknown>, action: string, index: number): number {
  const value = record.partition;
  if (value === undefined || value === null) return -1;
  if (
    typeof value !== "number" ||
    !Number.isInteger(value) ||
    value < 0 ||
    value > partitionNumberMax
  ) {
    throw invalidRequest(
      action,
      `records[${index}].partition must be an integer from 0 to ${partitionNumberMax}, or absent for the broker to pick`,
      { record: index, field: "partition" },
    );
  }
  return value;
}

function recordTimestamp(record: Record<string, unknown>, action: string, index: number): number {
  const value = record.timestamp;
  if (value === undefined || value === null) return -1;
  if (typeof value === "number" && Number.isInteger(value) && value > Number.MAX_SAFE_INTEGER) {
    // Not quoted: JSON.parse has rounded it, the digits sent are gone.
    throw invalidRequest(
      action,
      `records[${index}].timestamp is above 2^53 - 1 (${Number.MAX_SAFE_INTEGER}), the largest timestamp the broker keeps`,
      { record: index, field: "timestamp" },
    );
  }
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < -1) {
    throw invalidRequest(
      action,
      `records[${index}].timestamp must be an integer ≥ 0 (ms since the epoch), or -1 for the broker's clock`,
      { record: index, field: "timestamp" },
    );
  }
  return value;
}

function checkPayload(
  key: Uint8Array | null,
  value: Uint8Array,
  action: string,
  index: number,
): void {
  const payloadBytes = (key === null ? 0 : key.length) + value.length;
  if (payloadBytes > recordPayloadBytesMax) {
    throw new BrokerError(
      Errors.recordTooLarge,
      `${action}: records[${index}] is ${payloadBytes} bytes of key and value, over the limit of ${recordPayloadBytesMax}`,
      { record: index, size_bytes: payloadBytes, limit_bytes: recordPayloadBytesMax },
    );
  }
}

function checkCount(count: number, action: string): void {
  if (count === 0) throw invalidRequest(action, "the request holds no records");
  if (count > httpProduceRecordsMax) {
    throw invalidRequest(action, `the request holds more than ${httpProduceRecordsMax} records`, {
      limit_records: httpProduceRecordsMax,
    });
  }
}

/**
 * Refuses a JSON produce body, before it is parsed, for an array of more than
 * `httpProduceRecordsMax` elements found in it (`jsonShapeFault`): its `records` array, as the
 * record count after parsing is (the same error), or any other array (a produce body holds no
 * other array that may be that long), naming it. `field` is `path` formatted for messages.
 * @throws BrokerError invalid_request, always.
 */
export function refuseJsonProduceArray(
  path: readonly (string | number)[],
  field: string,
  action: string,
): never {
  if (path.length === 1 && path[0] === "records") checkCount(httpProduceRecordsMax + 1, action);
  const what = path.length === 0 ? "the body is an array" : `field ${quote(field)} is an array`;
  throw invalidRequest(
    action,
    `${what} of more than ${httpProduceRecordsMax} elements: the body must be a JSON object with a "records" array of at most ${httpProduceRecordsMax} records`,
    { field: path.length === 0 ? "(body)" : field, limit_records: httpProduceRecordsMax },
  );
}

/**
 * Refuses a JSON produce body, before it is parsed, whose objects hold more than
 * `httpProduceMembersMax` members together (`jsonShapeFault`; docs/decisions.md §19), naming
 * the object in which the count passed the limit (`path`; `field` is it formatted for messages):
 * a valid body holds no more, whether the excess is one record of a million fields or many
 * records of a few unknown ones.
 * @throws BrokerError invalid_request, always.
 */
export function refuseJsonProduceMembers(
  path: readonly (string | number)[],
  field: string,
  action: string,
): never {
  const where = path.length === 0 ? "in the body itself" : `in field ${quote(field)}`;
  throw invalidRequest(
    action,
    `the body's objects hold more than ${httpProduceMembersMax} members (passed ${where}): the body must be a JSON object with a "records" array of at most ${httpProduceRecordsMax} records, each of at most 6 fields`,
    { field: path.length === 0 ? "(body)" : field, limit_members: httpProduceMembersMax },
  );
}

/**
 * Decodes a parsed JSON produce body (the table above).
 * @param sizeHintBytes the body's size, used to size the batch buffer once.
 * @throws BrokerError invalid_request naming the record index and field; record_too_large if a
 *   record's key + value exceed {@link recordPayloadBytesMax}.
 */
export function decodeJsonProduce(
  body: unknown,
  options: { action: string; sizeHintBytes: number },
): DecodedProduce {
  const { action } = options;
  if (!isObject(body))
    throw invalidRequest(action, 'the body must be a JSON object with a "records" array');
  for (const field of Object.keys(body)) {
    if (field !== "records")
      throw invalidRequest(
        action,
        `unknown field ${quote(field)} in the body (expected "records")`,
        { field: clip(field) },
      );
  }
  const records = body.records;
  if (!Array.isArray(records))
    throw invalidRequest(action, 'the body must have a "records" array', { field: "records" });
  checkCount(records.length, action);
  const builder = new EntryBatchBuilder(Math.min(options.sizeHintBytes, 64 * 1024 * 1024) + 64);
  const partitions = new PartitionChoice();
  for (let index = 0; index < records.length; index++) {
    const record: unknown = records[index];
    if (!isObject(record))
      throw invalidRequest(action, `records[${index}] must be a JSON object`, { record: index });
    for (const field of Object.keys(record)) {
      if (!recordFields.has(field)) {
        throw invalidRequest(
          action,
          `records[${index}] has unknown field ${quote(field)} (expected key, key_b64, value, value_b64, partition, timestamp)`,
          { record: index, field: clip(field) },
        );
      }
    }
    const key = recordKey(record, action, index);
    const value = recordValue(record, action, index);
    const partition = recordPartition(record, action, index);
    const timestampMs = recordTimestamp(record, action, index);
    checkPayload(key, value, action, index);
    builder.add(key, value, timestampMs);
    partitions.add(index, partition);
  }
  return { batch: builder.build(), ...partitions.result() };
}

/**
 * Decodes an NDJSON produce body: one record per line, value = the line's bytes (module comment).
 * @param key applied to every record (null = no key).
 * @param partition applied to every record (undefined = the broker picks).
 * @throws BrokerError invalid_request if there is no record or too many; record_too_large for an
 *   over-long line (naming the record index and its line number).
 */
export function decodeNdjsonProduce(
  body: Uint8Array,
  options: { action: string; key: Uint8Array | null; partition: number | undefined },
): DecodedProduce {
  const { action, key } = options;
  const keyBytes = key === null ? 0 : key.length;
  // First pass: find and check every record, so the batch is allocated once at its exact size.
  let index = 0;
  let valueBytes = 0;
  forEachLine(body, (start, end, line) => {
    if (index >= httpProduceRecordsMax) checkCount(index + 1, action);
    const payloadBytes = keyBytes + (end - start);
    if (payloadBytes > recordPayloadBytesMax) {
      throw new BrokerError(
        Errors.recordTooLarge,
        `${action}: record ${index} (line ${line}) is ${payloadBytes} bytes of key and value, over the limit of ${recordPayloadBytesMax}`,
        { record: index, line, size_bytes: payloadBytes, limit_bytes: recordPayloadBytesMax },
      );
    }
    valueBytes += end - start;
    index++;
  });
  checkCount(index, action);
  const builder = new EntryBatchBuilder(valueBytes + index * (entryOverheadBytes + keyBytes));
  forEachLine(body, (start, end) => {
    builder.add(key, body.subarray(start, end), -1);
  });
  return options.partition === undefined
    ? { batch: builder.build() }
    : { batch: builder.build(), partition: options.partition };
}

/**
 * Calls `each` with the bounds of every non-empty line of an NDJSON body (module comment: LF
 * ends a line, one CR before it is dropped, empty lines are skipped) and its 1-based line number.
 */
function forEachLine(
  body: Uint8Array,
  each: (start: number, end: number, line: number) => void,
): void {
  let line = 0;
  let start = 0;
  const length = body.length;
  while (start < length) {
    // Runs of empty lines in a tight loop: one native indexOf call per empty line cost ~100 ns,
    // 2 s of blocked event loop for a 16 MiB body of newlines (attack11 F8).
    if (body[start] === 0x0a) {
      line++;
      start++;
      continue;
    }
    if (body[start] === 0x0d && start + 1 < length && body[start + 1] === 0x0a) {
      line++;
      start += 2;
      continue;
    }
    let end = body.indexOf(0x0a, start);
    const next = end < 0 ? length : end + 1;
    if (end < 0) end = length;
    line++;
    if (end > start && body[end - 1] === 0x0d) end--;
    if (end > start) each(start, end, line);
    start = next;
  }
}
