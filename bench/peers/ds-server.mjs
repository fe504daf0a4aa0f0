// Starts the Durable Streams reference server (npm @durable-streams/server, installed into
// bench/peers/node_modules by scripts/install-peers.sh) in file mode on loopback:
//   node bench/peers/ds-server.mjs DATA_DIR
// prints one line `listening: URL` and runs until SIGTERM/SIGINT. In file mode every append is
// written to the stream's segment file and fdatasync'ed before the response (FileBackedStreamStore).
import { DurableStreamTestServer } from "@durable-streams/server";

const dataDir = process.argv[2];
if (!dataDir) {
  process.stderr.write("usage: node ds-server.mjs DATA_DIR\n");
  process.exit(2);
}
const server = new DurableStreamTestServer({
  host: "127.0.0.1",
  port: 0,
  dataDir,
  compression: false,
});
const url = await server.start();
process.stdout.write(`listening: ${url}\n`);
const stop = async () => {
  await server.stop().catch(() => {});
  process.exit(0);
};
process.on("SIGTERM", stop);
process.on("SIGINT", stop);
