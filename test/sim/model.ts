/**
 * What the simulation knows about the records it sent, and the invariants it checks against what
 * the broker serves and what lies on the disk. Pure TypeScript (no vitest), so the same checks run
 * under `vitest` and from the replay command.
 *
 * Every record the simulation sends carries its own identity: the first 4 bytes of its value are
 * a u32 record id, so any record a read returns (or any valid record found on disk) can be traced
 * back to the request that sent it, and compared field by field (key, value, timestamp).
 *
 * Invariants (a {@link SimViolation} names the first one broken):
 *
 * | name                 | rule                                                                                      |
 * |----------------------|-------------------------------------------------------------------------------------------|
 * | decodes              | every record a fetch returns decodes and passes its CRC; `count` matches the bytes       |
 * | order                | offsets strictly increase within a fetch and start at or after the offset asked for       |
 * | below-hw             | no fetch returns a record at or above the high watermark it reports                       |
 * | known                | every record served (or found valid on disk) is one a producer sent, intact: key, value, timestamp, partition |
 * | stable               | an offset that was served or acknowledged (with fsync before ack) never holds another record, in any incarnation |
 * | unique               | a record appears at one offset only                                                       |
 * | request-shape        | the records of one request sit at consecutive offsets, in order; an acknowledged request at the offsets its ack named |
 * | prefix               | after recovery, what survives of an unacknowledged request is a prefix of it              |
 * | durable              | every acknowledged record (fsync before ack) is readable at its offset after any crash    |
 * | hw-monotonic         | the high watermark never goes backwards, across crashes too                               |
 * | contiguous           | with no corruption reported, the offsets below the high watermark have no gaps and a fetch below it is never empty |
 * | next-offset          | after recovery the next offset is above every valid record on disk (docs/decisions.md §3)          |
 * | fenced               | an append to a partition already fenced rejects with partition_fenced; a fenced partition still serves its acknowledged records; other partitions keep accepting appends |
 * | errors               | every rejected request gets an error of the table (partition_fenced, storage_error, unavailable), never a raw or internal one |
 * | settles              | every request settles (no request waits forever)                                          |
 * | topics               | a topic whose creation was acknowledged is available after every restart                  |
 */
import { DecodeStatus, RecordCursor } from "../../src/storage/record.ts";
import { bytesEqual } from "../../src/lib/bytes.ts";
import type { MemoryFileSystem } from "../../src/fs/memory.ts";

/** An invariant did not hold. The message names it; the harness adds the seed and a trace. */
export class SimViolation extends Error {
  override name = "SimViolation";
  constructor(
    readonly invariant: string,
    message: string,
  ) {
    super(`[${invariant}] ${message}`);
  }
}

/** One record as sent. `timestampMs` is what the broker must store (the clock for −1). */
export interface SentRecord {
  id: number;
  topic: string;
  partition: number;
  key: Uint8Array | null;
  value: Uint8Array;
  timestampMs: number;
  requestId: number;
  /** Position within its request's records for this partition. */
  index: number;
}

/** The records of one request that went to one partition. */
export interface SentRequest {
  id: number;
  topic: string;
  partition: number;
  records: SentRecord[];
  status: "pending" | "acked" | "failed";
  /** Offset of the first record, once known (from the ack, or from a read). */
  baseOffset: number;
}

/** What the model knows about one partition. */
export interface PartitionModel {
  topic: string;
  partition: number;
  /** offset → record id: served by a read, or acknowledged with fsync before ack. Never changes. */
  stable: Map<number, number>;
  /** record id → offset where it was seen. */
  offsetOf: Map<number, number>;
  /** offset → record id acknowledged without fsync (flushEveryRecords > 1): durable only after a clean stop. */
  ackedVolatile: Map<number, number>;
  /** Largest high watermark ever reported. */
  maxHighWatermark: number;
  /** A corrupt segment was reported for this partition: gaps are allowed from then on. */
  corruptReported: boolean;
  /** Incarnation in which the partition was seen fenced, or −1. */
  fencedIn: number;
}

/** A record as decoded from a fetch or from the disk. */
export interface SeenRecord {
  offset: number;
  id: number;
}

/** The simulation's knowledge; see the module comment. */
export class Model {
  readonly records: SentRecord[] = [];
  readonly requests: SentRequest[] = [];
  readonly partitions = new Map<string, PartitionModel>();

  /** The model of `topic/partition`, created on first use. */
  partition(topic: string, partition: number): PartitionModel {
    const key = `${topic}/${partition}`;
    let pm = this.partitions.get(key);
    if (pm === undefined) {
      pm = {
        topic,
        partition,
        stable: new Map(),
        offsetOf: new Map(),
        ackedVolatile: new Map(),
        maxHighWatermark: 0,
        corruptReported: false,
        fencedIn: -1,
      };
      this.partitions.set(key, pm);
    }
    return pm;
  }

  /** Registers a new request's records for one partition; ids are assigned here. */
  newRequest(
    topic: string,
    partition: number,
    entries: { key: Uint8Array | null; value: Uint8Array; timestampMs: number }[],
  ): SentRequest {
    const request: SentRequest = {
      id: this.requests.length,
      topic,
      partition,
      records: [],
      status: "pending",
      baseOffset: -1,
    };
    entries.forEach((e, index) => {
      const record: SentRecord = {
        id: this.records.length,
        topic,
        partition,
        key: e.key,
        value: e.value,
        timestampMs: e.timestampMs,
        requestId: request.id,
        index,
      };
      this.records.push(record);
      request.records.push(record);
    });
    this.requests.push(request);
    return request;
  }

  /**
   * Checks one record served at `offset` (or found on disk) against what was sent, and the
   * request-shape rule; with `stable`, also remembers it as served.
   */
  observe(pm: PartitionModel, seen: SeenRecord, options: { stable: boolean; where: string }): void {
    const { offset, id } = seen;
    const at = `${pm.topic}/${pm.partition} offset ${offset} (${options.where})`;
    const previous = pm.stable.get(offset);
    if (previous !== undefined && previous !== id) {
      throw new SimViolation(
        "stable",
        `${at} held record #${previous} before and now holds record #${id}`,
      );
    }
    const record = this.records[id];
    const request = this.requests[record.requestId];
    const expectedBase = offset - record.index;
    if (request.baseOffset >= 0 && request.baseOffset !== expectedBase) {
      throw new SimViolation(
        "request-shape",
        `${at} holds record #${id} (index ${record.index} of request #${request.id}), but that request starts at offset ${request.baseOffset}`,
      );
    }
    if (!options.stable) return;
    const where = pm.offsetOf.get(id);
    if (where !== undefined && where !== offset)
      throw new SimViolation("unique", `${at}: record #${id} was already seen at offset ${where}`);
    pm.stable.set(offset, id);
    pm.offsetOf.set(id, offset);
    if (request.baseOffset < 0) request.baseOffset = expectedBase;
  }

  /** Records an acknowledged request at `baseOffset` (stable only if acks wait for fsync). */
  ack(request: SentRequest, baseOffset: number, options: { durable: boolean }): void {
    const pm = this.partition(request.topic, request.partition);
    if (request.baseOffset >= 0 && request.baseOffset !== baseOffset) {
      throw new SimViolation(
        "request-shape",
        `request #${request.id} acknowledged at offset ${baseOffset}, but its records were seen from offset ${request.baseOffset}`,
      );
    }
    request.status = "acked";
    for (const r of request.records) {
      const offset = baseOffset + r.index;
      if (options.durable) {
        this.observe(pm, { offset, id: r.id }, { stable: true, where: "acknowledged" });
      } else {
        const previous = pm.stable.get(offset);
        if (previous !== undefined && previous !== r.id) {
          throw new SimViolation(
            "stable",
            `${pm.topic}/${pm.partition} acknowledged record #${r.id} at offset ${offset}, which served record #${previous} before`,
          );
        }
        pm.ackedVolatile.set(offset, r.id);
      }
    }
    request.baseOffset = baseOffset;
  }
}

/**
 * Decodes a fetch's record bytes and checks them field by field against the model.
 * @returns the records in order.
 */
export function decodeServed(
  model: Model,
  pm: PartitionModel,
  bytes: Uint8Array,
  options: { count: number; where: string },
): SeenRecord[] {
  const cursor = new RecordCursor().reset(bytes);
  const out: SeenRecord[] = [];
  let p = 0;
  while (p < bytes.length) {
    const status = cursor.decode(p);
    if (status !== DecodeStatus.Ok) {
      throw new SimViolation(
        "decodes",
        `${pm.topic}/${pm.partition} (${options.where}): record ${out.length} at byte ${p} does not decode: ${cursor.reason}`,
      );
    }
    const id = checkKnown(model, pm, cursor, options.where);
    out.push({ offset: cursor.offset, id });
    p += cursor.sizeBytes;
  }
  if (out.length !== options.count) {
    throw new SimViolation(
      "decodes",
      `${pm.topic}/${pm.partition} (${options.where}): count says ${options.count} records, the bytes hold ${out.length}`,
    );
  }
  return out;
}

/** Checks that the decoded record is one that was sent to this partition, intact. @returns its id. */
function checkKnown(model: Model, pm: PartitionModel, cursor: RecordCursor, where: string): number {
  const at = `${pm.topic}/${pm.partition} offset ${cursor.offset} (${where})`;
  const value = cursor.value();
  if (value.length < 4)
    throw new SimViolation(
      "known",
      `${at}: value of ${value.length} bytes carries no record id; no producer sent it`,
    );
  const id = new DataView(value.buffer, value.byteOffset, 4).getUint32(0);
  const sent = model.records[id];
  if (sent === undefined) throw new SimViolation("known", `${at}: record id ${id} was never sent`);
  if (sent.topic !== pm.topic || sent.partition !== pm.partition) {
    throw new SimViolation(
      "known",
      `${at}: record #${id} was sent to ${sent.topic}/${sent.partition}`,
    );
  }
  if (!bytesEqual(value, sent.value))
    throw new SimViolation("known", `${at}: record #${id} value differs from what was sent`);
  const key = cursor.key();
  if ((key === null) !== (sent.key === null) || (key !== null && !bytesEqual(key, sent.key!))) {
    throw new SimViolation(
      "known",
      `${at}: record #${id} key differs from what was sent (${key === null ? "no key" : `${key.length} bytes`} vs ${sent.key === null ? "no key" : `${sent.key.length} bytes`})`,
    );
  }
  if (cursor.timestampMs !== sent.timestampMs) {
    throw new SimViolation(
      "known",
      `${at}: record #${id} has timestamp ${cursor.timestampMs}, sent ${sent.timestampMs}`,
    );
  }
  return id;
}

/**
 * Every valid record in every `.log` file of a partition directory, found by decoding at every
 * byte position where a sequential decode fails (so records behind a corrupt stretch count too,
 * as docs/decisions.md §3 counts them). Each is checked against the model (`known`).
 * @returns the largest offset found, or −1.
 */
export function maxValidOffsetOnDisk(
  model: Model,
  pm: PartitionModel,
  mem: MemoryFileSystem,
  dir: string,
): number {
  let names: string[];
  try {
    names = mem.listTree(dir);
  } catch {
    return -1;
  }
  let max = -1;
  const cursor = new RecordCursor();
  for (const path of names) {
    if (!/\/\d{20}\.log$/.test(path)) continue;
    const bytes = mem.readFileSync(path);
    cursor.reset(bytes);
    let p = 0;
    while (p < bytes.length) {
      if (cursor.decode(p) === DecodeStatus.Ok) {
        checkKnown(model, pm, cursor, `on disk in ${path} at byte ${p}`);
        if (cursor.offset > max) max = cursor.offset;
        p += cursor.sizeBytes;
      } else {
        p++;
      }
    }
  }
  return max;
}
