// A bare constant-answer server for the socket floor (bench/socket-floor.mjs): it speaks just
// enough RESP (the protocol redis-benchmark sends) to count each complete command and answers
// every one with `+OK\r\n`, one write per read that completed any. No storage, no broker: what a
// request costs through the runtime's socket layer alone. The parsing is the same JavaScript in
// every variant, so the variants differ only in the socket layer.
//   node bench/socket-floor-server.mjs node-net      node:net, `data` events, socket.write
//   node bench/socket-floor-server.mjs node-onread   node:net, reads into one shared buffer
//                                                    (`onread`, as src/runtime/tcp.ts on Node)
//   node bench/socket-floor-server.mjs node-direct   node-onread, answers written on the socket's
//                                                    handle (as src/runtime/tcp.ts on Node)
//   bun  bench/socket-floor-server.mjs node-net      Bun's node:net emulation
//   bun  bench/socket-floor-server.mjs bun-listen    Bun.listen (uSockets), socket.write
// A second argument `defer` writes the answers later, in one batch per event-loop turn (below).
// Prints one line `listening: PORT`, runs until SIGTERM.
import * as net from "node:net";

const variant = process.argv[2] ?? "node-net";
// `defer`: answers are not written inside the read's callback but gathered from every connection
// and written in one `setImmediate` per event-loop turn, as the broker writes them when an fsync
// completes (many connections answered at once, outside any read callback).
const defer = process.argv[3] === "defer";
/** @type {Array<() => void>} */
let deferred = [];
const flushDeferred = () => {
  const writes = deferred;
  deferred = [];
  for (const write of writes) write();
};
function answer(write) {
  if (!defer) return write();
  if (deferred.length === 0) setImmediate(flushDeferred);
  deferred.push(write);
}
const OK = new Uint8Array(64 * 5);
for (let i = 0; i < 64; i++) OK.set([43, 79, 75, 13, 10], i * 5);

/** Per connection: bytes of an unfinished command. Returns how many commands `chunk` completed. */
class RespCounter {
  rest = null;
  /** @param {Uint8Array} chunk */
  push(chunk) {
    let buf = chunk;
    if (this.rest !== null) {
      buf = new Uint8Array(this.rest.length + chunk.length);
      buf.set(this.rest, 0);
      buf.set(chunk, this.rest.length);
      this.rest = null;
    }
    let p = 0;
    let count = 0;
    for (;;) {
      const end = command(buf, p);
      if (end < 0) break;
      p = end;
      count++;
    }
    if (p < buf.length) this.rest = buf.slice(p);
    return count;
  }
}

/** Reads an integer line at `p` (after its type byte); returns [value, next] or null. */
function intLine(buf, p) {
  let v = 0;
  for (let i = p; i + 1 < buf.length; i++) {
    const c = buf[i];
    if (c === 13) return buf[i + 1] === 10 ? [v, i + 2] : null;
    v = v * 10 + (c - 48);
  }
  return null;
}

/** The end of the complete command at `p` (`*N` then N bulk strings), or -1. */
function command(buf, p) {
  if (p >= buf.length || buf[p] !== 42) return -1;
  const n = intLine(buf, p + 1);
  if (n === null) return -1;
  let at = n[1];
  for (let k = 0; k < n[0]; k++) {
    if (at >= buf.length) return -1;
    const len = intLine(buf, at + 1);
    if (len === null) return -1;
    at = len[1] + len[0] + 2;
    if (at > buf.length) return -1;
  }
  return at;
}

function answers(count) {
  if (count <= 64) return OK.subarray(0, count * 5);
  const out = new Uint8Array(count * 5);
  for (let i = 0; i < count; i++) out.set(OK.subarray(0, 5), i * 5);
  return out;
}

function listening(port) {
  process.stdout.write(`listening: ${port}\n`);
}

process.on("SIGTERM", () => process.exit(0));

if (variant === "bun-listen") {
  const server = globalThis.Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      open(socket) {
        socket.data = new RespCounter();
      },
      data(socket, chunk) {
        const count = socket.data.push(chunk);
        if (count > 0) answer(() => socket.write(answers(count)));
      },
      error() {},
      close() {},
    },
  });
  listening(server.port);
} else if (variant === "node-onread" || variant === "node-direct") {
  // `node-direct`: the answers written on the handle itself, not through net.Socket's Writable
  // (what src/runtime/tcp.ts does on Node): a write request reused while the kernel takes every
  // byte at once, a fresh one (kept until it ends) when a write must wait.
  const direct = variant === "node-direct";
  const { WriteWrap, streamBaseState, kLastWriteWasAsync } = direct
    ? process.binding("stream_wrap")
    : {};
  let spare = null;
  const writeDirect = (socket, bytes) => {
    const handle = socket._handle;
    if (handle === null) return;
    const req = spare ?? new WriteWrap();
    spare = null;
    if (handle.writeBuffer(req, bytes) !== 0) return socket.destroy();
    if (streamBaseState[kLastWriteWasAsync] === 0) spare = req;
    else {
      req.bytes = bytes;
      req.oncomplete = () => {};
    }
  };
  const shared = Buffer.allocUnsafe(65536);
  const server = net.createServer({ noDelay: true, pauseOnConnect: true }, (accepted) => {
    const handle = accepted._handle;
    accepted._handle = null;
    accepted.destroy();
    const counter = new RespCounter();
    let socket = null;
    socket = new net.Socket({
      handle,
      readable: true,
      writable: true,
      onread: {
        buffer: shared,
        callback(bytes, buffer) {
          // Copied out: what the broker's read slab does (src/lib/read-slab.ts).
          const count = counter.push(buffer.slice(0, bytes));
          if (count > 0)
            answer(
              direct
                ? () => writeDirect(socket, answers(count))
                : () => socket.write(answers(count)),
            );
          return true;
        },
      },
    });
    socket.setNoDelay(true);
    socket.on("error", () => {});
  });
  server.listen(0, "127.0.0.1", () => listening(server.address().port));
} else {
  const server = net.createServer({ noDelay: true }, (socket) => {
    socket.setNoDelay(true);
    socket.on("error", () => {});
    const counter = new RespCounter();
    socket.on("data", (chunk) => {
      const count = counter.push(chunk);
      if (count > 0) answer(() => socket.write(answers(count)));
    });
  });
  server.listen(0, "127.0.0.1", () => listening(server.address().port));
}
