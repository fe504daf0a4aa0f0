/**
 * The operation history of a Jepsen-style run (issue #16, "How it is shown to work"): what every
 * client process asked for and what it was told, in the order it happened, for the checker
 * (`checker.ts`) to judge afterwards.
 *
 * Model (after Jepsen's queue and Kafka workloads):
 * - A **process** is one logical client (`producer-3`, `idem-1`, `consumer-0`, `group-a/1`). It has
 *   at most one operation outstanding: an `invoke` is followed by exactly one completion from the
 *   same process before its next `invoke`.
 * - Completions: `ok` (the system said it happened, with what it returned), `fail` (it certainly
 *   did not happen: the record is not in the log), `info` (unknown: a timeout, a lost connection,
 *   a retriable error after the request may have been carried out). Any client error on a send is
 *   `info` unless the caller knows the record was never appended.
 * - `send`: one produce of `values` to one partition; `ok` carries each value's offset. Values are
 *   unique over a run (the checker relies on it to tell records apart). `idempotent` marks sends
 *   of an IdempotentProducer: a value of it must never be stored twice.
 * - `poll`: what one consumer read, in read order, each record with its partition, offset and
 *   value. `session` changes when the consumer may legitimately rewind (a group member's new
 *   generation); within one session a partition's offsets must advance without gaps.
 *   `group` names the consumer group of a group member.
 * - `final-read`: after the faults healed, everything a partition holds from its log start to its
 *   high watermark, read by the harness (`node` says which broker answered, when known).
 *
 * Time is milliseconds since the history was created (`performance.now()`), for reports only:
 * the checker never orders by it.
 */

/** How an operation ended (or that it started). */
export type OpType = "invoke" | "ok" | "fail" | "info";

/** What an operation does. */
export type OpFunction = "send" | "poll" | "final-read" | "commit";

/** One record as the history knows it: where it is (offset once known) and its value. */
export interface HistoryRecord {
  topic: string;
  partition: number;
  /** The record's offset; absent on a send's invoke and on a send that did not complete `ok`. */
  offset?: number;
  value: string;
}

/** One entry of the history. */
export interface Op {
  /** Position in the history, from 0. */
  index: number;
  process: string;
  type: OpType;
  f: OpFunction;
  /** Milliseconds since the history began. */
  timeMs: number;
  /**
   * send: the values sent (and on `ok`, their offsets); poll / final-read: what was read, in order;
   * commit: per partition the offset committed (the next one to read; `value` empty).
   */
  records: HistoryRecord[];
  /** send: sent by an idempotent producer. */
  idempotent?: boolean;
  /** poll / commit: the consumer group, for a group member. */
  group?: string;
  /** poll / acknowledged commit: the read session (a consumer's offsets may go back only when it changes). */
  session?: string;
  /** final-read: the partition read (its records may be none). */
  topic?: string;
  partition?: number;
  /** final-read: the broker that answered. */
  node?: number;
  /** fail / info: why. */
  error?: string;
}

/** A pending operation of one process, completed exactly once. */
export interface PendingOp {
  /** The history entry of the invoke. */
  readonly invoke: Op;
  /**
   * The system said it happened; `records` are what it returned (a send: the values with their
   * offsets). `fields.session` replaces the invoke's session (a group member learns its
   * generation only once the poll returns).
   */
  ok(records?: HistoryRecord[], fields?: Pick<Op, "session">): Op;
  /** It certainly did not happen. */
  fail(error: unknown): Op;
  /** It may or may not have happened. */
  info(error: unknown): Op;
}

function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}

/** An append-only operation history (see the module comment). */
export class History {
  readonly ops: Op[] = [];
  readonly #pending = new Map<string, Op>();
  readonly #start: number;
  readonly #now: () => number;

  /** @param options.now a clock in ms (default `performance.now`); tests pass a fake one. */
  constructor(options: { now?: () => number } = {}) {
    this.#now = options.now ?? (() => performance.now());
    this.#start = this.#now();
  }

  #append(op: Omit<Op, "index" | "timeMs">): Op {
    const entry: Op = { index: this.ops.length, timeMs: this.#now() - this.#start, ...op };
    this.ops.push(entry);
    return entry;
  }

  /**
   * Records the start of an operation and returns the handle that completes it.
   * @throws Error if `process` already has an operation outstanding (a workload bug).
   */
  invoke(
    process: string,
    f: OpFunction,
    fields: Pick<Op, "records"> &
      Partial<Pick<Op, "idempotent" | "group" | "session" | "topic" | "partition" | "node">>,
  ): PendingOp {
    if (this.#pending.has(process)) {
      throw new Error(
        `Cannot invoke ${f} for process "${process}": op ${this.#pending.get(process)!.index} is still outstanding`,
      );
    }
    const invoke = this.#append({ process, type: "invoke", f, ...fields });
    this.#pending.set(process, invoke);
    let done = false;
    const complete = (
      type: OpType,
      records: HistoryRecord[],
      error?: string,
      fields: Pick<Op, "session"> = {},
    ): Op => {
      if (done) throw new Error(`Op ${invoke.index} of process "${process}" completed twice`);
      done = true;
      this.#pending.delete(process);
      const { index: _i, timeMs: _t, type: _ty, records: _r, ...rest } = invoke;
      return this.#append({
        ...rest,
        ...fields,
        type,
        records,
        ...(error === undefined ? {} : { error }),
      });
    };
    return {
      invoke,
      ok: (records, fields) => complete("ok", records ?? invoke.records, undefined, fields),
      fail: (error) => complete("fail", invoke.records, describeError(error)),
      info: (error) => complete("info", invoke.records, describeError(error)),
    };
  }

  /**
   * Records a completed final read of one partition (an invoke and its `ok` at once): `records`
   * are everything it holds, from its log start to its high watermark, in offset order.
   */
  finalRead(
    tp: { topic: string; partition: number },
    records: HistoryRecord[],
    options: { node?: number } = {},
  ): void {
    const process = `final-read${options.node === undefined ? "" : `-${options.node}`}`;
    this.invoke(process, "final-read", {
      records: [],
      topic: tp.topic,
      partition: tp.partition,
      ...(options.node === undefined ? {} : { node: options.node }),
    }).ok(records);
  }

  /** Milliseconds since the history began, on the clock of its entries' `timeMs`. */
  elapsedMs(): number {
    return this.#now() - this.#start;
  }

  /** Processes with an operation outstanding (they crashed or were abandoned mid-operation). */
  get outstanding(): Op[] {
    return [...this.#pending.values()];
  }

  /** The history as JSON lines (one op a line), for saving next to a failing run's logs. */
  toJsonLines(): string {
    return this.ops.map((op) => JSON.stringify(op)).join("\n");
  }
}
