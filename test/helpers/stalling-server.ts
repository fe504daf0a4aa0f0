/**
 * An HTTP server on loopback that answers every request with 200, announces 64 bytes, sends one
 * and never the rest: a store or etcd member whose body stalls after the headers (field failures
 * #43; `src/runtime/deadline.ts`).
 */
import { createServer } from "node:http";
import * as v8 from "node:v8";
import * as vm from "node:vm";

/** A started stalling server: its URL, how many requests it got, and how to stop it. */
export interface StallingServer {
  readonly url: string;
  readonly requests: () => number;
  close(): Promise<void>;
}

/** Starts a {@link StallingServer} whose one sent byte is `firstByte`. */
export async function startStallingServer(
  contentType: string,
  firstByte: string,
): Promise<StallingServer> {
  let requests = 0;
  const server = createServer((req, res) => {
    requests++;
    req.resume();
    res.writeHead(200, { "content-length": "64", "content-type": contentType });
    res.write(firstByte);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return {
    url: `http://127.0.0.1:${(server.address() as { port: number }).port}`,
    requests: () => requests,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** Runs `gc()` every `everyMs` until the returned function is called (fetch holds signals weakly). */
export function collectGarbageEvery(everyMs: number): () => void {
  v8.setFlagsFromString("--expose-gc");
  const gc = vm.runInNewContext("gc") as () => void;
  const timer = setInterval(gc, everyMs);
  return () => clearInterval(timer);
}
