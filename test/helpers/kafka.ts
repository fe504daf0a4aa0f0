/** Helpers for the Kafka listener's tests. */
import { utf8 } from "../../src/lib/bytes.ts";
import { FrameDecoder } from "../../src/protocol/frame.ts";
import { decodeResponseHeader } from "../../src/protocol/kafka/header.ts";
import { encodeRecord } from "../../src/storage/record.ts";
import type { ByteSocket, ByteSocketHandlers } from "../../src/transport/tcp/socket.ts";

/** Stored records (docs/storage.md "Records") back to back, as a fetch returns them. */
export function storedRecords(
  records: { offset: number; ts: number; key: string | null; value: string }[],
): { bytes: Uint8Array; count: number } {
  const parts = records.map((r) =>
    encodeRecord({
      offset: r.offset,
      timestampMs: r.ts,
      key: r.key === null ? null : utf8(r.key),
      value: utf8(r.value),
    }),
  );
  const bytes = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    bytes.set(p, at);
    at += p.length;
  }
  return { bytes, count: records.length };
}

/** An in-memory connection for a transport: what it writes is kept; `send` delivers bytes to it. */
export class FakeSocket implements ByteSocket {
  readonly remoteAddress: string;
  constructor(remoteAddress = "test:1") {
    this.remoteAddress = remoteAddress;
  }
  handlers: ByteSocketHandlers | null = null;
  written: Uint8Array[] = [];
  closed = false;
  attach(handlers: ByteSocketHandlers): void {
    this.handlers = handlers;
  }
  write(chunks: readonly Uint8Array[], onWritten?: () => void): boolean {
    if (this.closed) return true;
    for (const c of chunks) this.written.push(c.slice());
    onWritten?.();
    return true;
  }
  pause(): void {}
  resume(): void {}
  end(): void {
    this.#close();
  }
  destroy(): void {
    this.#close();
  }
  #close(): void {
    if (this.closed) return;
    this.closed = true;
    queueMicrotask(() => this.handlers!.onClose());
  }
  send(bytes: Uint8Array): void {
    if (!this.closed) this.handlers!.onData(bytes);
  }
  /** Response frames written so far: correlation id and body. */
  responses(): { correlationId: number; body: Uint8Array }[] {
    const d = new FrameDecoder({ lengthMin: 4, lengthMax: 1 << 30 });
    for (const c of this.written) d.push(c);
    const out = [];
    for (let f = d.next(); f !== null; f = d.next()) out.push(decodeResponseHeader(f));
    return out;
  }
}
