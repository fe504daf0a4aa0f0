// The loopback ceiling's server (bench/harness.ts, `loopback` cases): a bare node:net server, no
// broker, that answers every request frame of the es-broker TCP protocol (`length u32` | the
// rest) with a 30-byte Produce response frame (one span) as soon as the frame has fully arrived.
// The load generator sends it the same Produce frames it sends es-broker, so a case measures what
// the same bytes cost through a socket round trip on this machine, with nothing stored.
//   node bench/loopback-server.mjs      prints one line `listening: PORT`, runs until SIGTERM/SIGINT
import * as net from "node:net";

const server = net.createServer({ noDelay: true }, (socket) => {
  socket.setNoDelay(true);
  socket.on("error", () => {});
  let chunks = [];
  let buffered = 0;
  let need = -1;
  socket.on("data", (chunk) => {
    chunks.push(chunk);
    buffered += chunk.length;
    let answers = 0;
    let ids = [];
    for (;;) {
      if (need < 0) {
        if (buffered < 12) break;
        const head = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
        chunks = [head];
        need = 4 + head.readUInt32BE(0);
      }
      if (buffered < need) break;
      const all = chunks.length === 1 ? chunks[0] : Buffer.concat(chunks);
      ids.push(all.readUInt32BE(8));
      answers++;
      const rest = all.subarray(need);
      chunks = rest.length > 0 ? [rest] : [];
      buffered = rest.length;
      need = -1;
    }
    if (answers === 0) return;
    const out = Buffer.allocUnsafe(30 * answers);
    for (let i = 0; i < answers; i++) {
      const at = 30 * i;
      out.writeUInt32BE(26, at); // length
      out.writeUInt32BE(ids[i], at + 4); // correlation id
      out.writeUInt16BE(0, at + 8); // error: none
      out.writeUInt32BE(1, at + 10); // span_count
      out.writeUInt32BE(0, at + 14); // partition
      out.writeUInt32BE(0, at + 18); // base_offset (high)
      out.writeUInt32BE(0, at + 22); // base_offset (low)
      out.writeUInt32BE(0, at + 26); // count
    }
    ids = [];
    socket.write(out);
  });
});
server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening: ${server.address().port}\n`);
});
const stop = () => server.close(() => process.exit(0));
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", stop);
