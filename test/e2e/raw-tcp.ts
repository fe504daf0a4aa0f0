/**
 * The TCP protocol over a bare socket, for what `TcpClient` will not send: frames with any bytes
 * in them (a config nested 5,000 levels deep, a 60 KB topic name, garbage), read back as parsed
 * response frames (`docs/protocol.md`).
 */
import * as net from "node:net";

/** One response frame. */
export interface RawTcpResponse {
  correlationId: number;
  /** 0 = success, else the error-table row's TCP number. */
  error: number;
  /** For an error: its code, message and details (when present). */
  code?: string;
  message?: string;
  details?: Record<string, unknown>;
  /** The whole body after the error field. */
  body: Buffer;
  /** Bytes of the whole frame, length prefix included. */
  frameBytes: number;
}

/** An open connection. */
export interface RawTcpConnection {
  /** Writes raw bytes (a frame from {@link requestFrame}, or anything). */
  write(bytes: Uint8Array): void;
  /** The next response frame, or "closed" once the server closed the connection without one. */
  next(timeoutMs?: number): Promise<RawTcpResponse | "closed" | "timeout">;
  /** Resolves when the connection is closed by either side. */
  closed: Promise<void>;
  destroy(): void;
}

/** A request frame: length, api, version, correlation id, then `body`. */
export function requestFrame(
  api: number,
  correlationId: number,
  body: Uint8Array,
  version = 0,
): Buffer {
  const head = Buffer.alloc(12);
  head.writeUInt32BE(8 + body.length, 0);
  head.writeUInt16BE(api, 4);
  head.writeUInt16BE(version, 6);
  head.writeUInt32BE(correlationId, 8);
  return Buffer.concat([head, body]);
}

/** A `str16`: u16 byte length, then the UTF-8 bytes. */
export function str16(text: string | Uint8Array): Buffer {
  const bytes = typeof text === "string" ? Buffer.from(text) : Buffer.from(text);
  const length = Buffer.alloc(2);
  length.writeUInt16BE(bytes.length);
  return Buffer.concat([length, bytes]);
}

/** A u32, big-endian. */
export function u32(value: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(value >>> 0);
  return b;
}

/** The body of a CreateTopic request with `config` sent as given (raw JSON text, not checked). */
export function createTopicBody(topic: string, partitions: number, configText: string): Buffer {
  const config = Buffer.from(configText);
  return Buffer.concat([str16(topic), u32(partitions), u32(config.length), config]);
}

function parseResponse(frame: Buffer): RawTcpResponse {
  const correlationId = frame.readUInt32BE(4);
  const error = frame.readUInt16BE(8);
  const body = frame.subarray(10);
  const response: RawTcpResponse = { correlationId, error, body, frameBytes: frame.length };
  if (error !== 0) {
    const codeLength = body.readUInt16BE(0);
    response.code = body.subarray(2, 2 + codeLength).toString("utf8");
    const messageLength = body.readUInt32BE(2 + codeLength);
    const at = 6 + codeLength;
    response.message = body.subarray(at, at + messageLength).toString("utf8");
    const rest = at + messageLength;
    if (body.length >= rest + 4) {
      const detailsLength = body.readUInt32BE(rest);
      response.details = JSON.parse(body.subarray(rest + 4, rest + 4 + detailsLength).toString());
    }
  }
  return response;
}

/** Connects to the broker's TCP port. */
export function openRawTcp(options: { host: string; port: number }): Promise<RawTcpConnection> {
  return new Promise((resolveOpen, rejectOpen) => {
    const socket = net.connect(options.port, options.host);
    let received = Buffer.alloc(0);
    const frames: Buffer[] = [];
    let isClosed = false;
    let waiter: (() => void) | null = null;
    const wake = () => {
      const w = waiter;
      waiter = null;
      w?.();
    };
    socket.on("data", (data: Buffer) => {
      received = Buffer.concat([received, data]);
      while (received.length >= 4) {
        const length = received.readUInt32BE(0);
        if (received.length < 4 + length) break;
        frames.push(received.subarray(0, 4 + length));
        received = received.subarray(4 + length);
      }
      wake();
    });
    const closed = new Promise<void>((res) =>
      socket.once("close", () => {
        isClosed = true;
        wake();
        res();
      }),
    );
    socket.on("error", (error) => {
      if (!socket.readyState || socket.connecting) rejectOpen(error);
    });
    socket.once("connect", () =>
      resolveOpen({
        write: (bytes) => {
          if (!socket.destroyed) socket.write(bytes);
        },
        next: async (timeoutMs = 10_000) => {
          const deadline = Date.now() + timeoutMs;
          for (;;) {
            const frame = frames.shift();
            if (frame !== undefined) return parseResponse(frame);
            if (isClosed) return "closed";
            const left = deadline - Date.now();
            if (left <= 0) return "timeout";
            await new Promise<void>((res) => {
              const timer = setTimeout(res, left);
              waiter = () => {
                clearTimeout(timer);
                res();
              };
            });
          }
        },
        closed,
        destroy: () => socket.destroy(),
      }),
    );
  });
}
