/**
 * Live reads of the Durable Streams protocol as Server-Sent Events (protocol §5.8;
 * docs/durable-streams.md "SSE"). Each read becomes one `data` event followed by one `control`
 * event; a read that found nothing sends the control event alone (the first one, and a keep-alive
 * after each wait of `heartbeatMs` with no data):
 *
 * ```
 * event: data
 * data:[{"k":"v"},{"k":"w"}]
 *
 * event: control
 * data:{"streamNextOffset":"0000000000000002_0000000000000000","streamCursor":"1234","upToDate":true}
 * id:0000000000000002_0000000000000000
 *
 * ```
 *
 * - **Framing cannot be forged by payload bytes.** Text and JSON data are split on CR, LF and
 *   CRLF — the only line ends of SSE — and every line is its own `data:` field, so a payload line
 *   can never start a field or end an event. A line that starts with a space gets one more space
 *   (the parser strips exactly one). U+2028, U+2029, U+0085 and NUL are data. SSE has no way to
 *   carry a CR: a CR or CRLF in a text stream arrives as LF (the protocol's own limit; binary
 *   content types are base64-encoded and exact, and catch-up reads are exact for every type).
 *   Bytes that are not UTF-8 in a text stream arrive as U+FFFD.
 * - **Resume is exact.** Every control event carries the offset after the data it follows, also
 *   as the event `id`: a reconnect with `offset=` (or, for a browser EventSource, the automatic
 *   `Last-Event-ID` header, which takes precedence) resumes at exactly the next record.
 * - **EOF.** When the stream is closed and the data sent reaches its final offset, the control
 *   event says `streamClosed` (and `upToDate`), has no cursor, and the connection ends. Whether
 *   the stream is closed is read before the data, so the final record is always sent first.
 * - The connection ends after about `connectionMs` (protocol §10.2), on client disconnect and on
 *   server shutdown (the request's signal), and at once when the stream is deleted or expires
 *   (the read after the wait throws 404/410; a reconnect gets the same answer).
 */
import type { StreamInfo, StreamReadResult, Streams } from "../../../broker/streams/types.ts";
import { formatStreamOffset } from "../../../broker/streams/offsets.ts";
import { encodeBase64 } from "../../../lib/base64.ts";
import type { Logger } from "../../../lib/logger.ts";
import { errorMessage } from "../../../lib/errors.ts";
import { baseHeaders } from "./response.ts";

const textDecoder = new TextDecoder();
const textEncoder = new TextEncoder();

/** What {@link streamSse} needs. */
export interface StreamSseOptions {
  streams: Streams;
  path: string;
  /** The first read, done before the answer starts (so its errors are ordinary JSON errors). */
  first: StreamReadResult;
  /** The client's `cursor` query parameter. */
  clientCursor: string | undefined;
  /** Longest wait for data between two events, in ms (then a keep-alive control event). */
  heartbeatMs: number;
  /** The connection ends after this many ms. */
  connectionMs: number;
  maxBytes: number;
  /** Aborted on client disconnect or server shutdown. */
  signal: AbortSignal;
  logger: Logger;
  nowMs: () => number;
}

/** `data:` lines of a text payload (module comment). */
function dataLines(text: string): string {
  let out = "";
  for (const line of text.split(/\r\n|\r|\n/))
    out += `data:${line.startsWith(" ") ? " " : ""}${line}\n`;
  return out;
}

/** The `data` event of one read. */
function dataEvent(info: StreamInfo, values: readonly Uint8Array[]): string {
  if (!info.text) {
    let size = 0;
    for (const v of values) size += v.length;
    const all = new Uint8Array(size);
    let at = 0;
    for (const v of values) {
      all.set(v, at);
      at += v.length;
    }
    return `event: data\ndata:${encodeBase64(all)}\n\n`;
  }
  const text = info.json
    ? `[${values.map((v) => textDecoder.decode(v)).join(",")}]`
    : values.map((v) => textDecoder.decode(v)).join("");
  return `event: data\n${dataLines(text)}\n`;
}

/** The SSE answer of a live read (module comment). */
export function streamSse(options: StreamSseOptions): Response {
  const { streams, path, first, signal } = options;
  const info = first.info;
  const started = options.nowMs();
  let pending: StreamReadResult | null = first;
  let position = first.start;
  let cursor = streams.cursor(options.clientCursor);
  let ended = false;

  const control = (r: StreamReadResult): string => {
    const next = formatStreamOffset(r.next);
    const fields: Record<string, unknown> = { streamNextOffset: next };
    if (r.closed) {
      fields.streamClosed = true;
      fields.upToDate = true;
    } else {
      // Never backwards within a connection: the later of the last cursor and the clock's.
      const now = streams.cursor(undefined);
      if (Number(now) > Number(cursor)) cursor = now;
      fields.streamCursor = cursor;
      if (r.upToDate) fields.upToDate = true;
    }
    return `event: control\ndata:${JSON.stringify(fields)}\nid:${next}\n\n`;
  };

  const body = new ReadableStream<Uint8Array>({
    pull: async (controller) => {
      try {
        for (;;) {
          if (ended || signal.aborted) {
            ended = true;
            controller.close();
            return;
          }
          if (pending !== null) {
            const r = pending;
            pending = null;
            const text = (r.values.length > 0 ? dataEvent(info, r.values) : "") + control(r);
            position = r.next;
            controller.enqueue(textEncoder.encode(text));
            if (r.closed) {
              ended = true;
              controller.close();
            }
            return;
          }
          const left = options.connectionMs - (options.nowMs() - started);
          if (left <= 0) {
            ended = true;
            controller.close();
            return;
          }
          await streams.waitForData({
            path,
            position,
            waitMs: Math.min(options.heartbeatMs, left),
            signal,
          });
          if (signal.aborted) continue;
          const r = await streams.read({ path, position, waitMs: 0, maxBytes: options.maxBytes });
          // Nothing new and not closed: a keep-alive control event once the wait ran out.
          pending = r;
        }
      } catch (err) {
        // The stream was deleted, or the broker is shutting down: end the event stream.
        options.logger.log("debug", "stream.sse_ended", {
          stream: path,
          reason: errorMessage(err),
        });
        ended = true;
        controller.close();
      }
    },
    cancel: () => {
      ended = true;
    },
  });

  const headers = baseHeaders("no-cache");
  headers.set("content-type", "text/event-stream");
  if (!info.text) headers.set("stream-sse-data-encoding", "base64");
  return new Response(body, { status: 200, headers });
}
