/**
 * An idle HTTP keep-alive connection stays open well past `node:http`'s 5 s (docs/decisions.md
 * §18, attack10 F7): a client whose event loop was busy for a few seconds after an answer, and
 * then reuses its connection, must find it open instead of getting EPIPE or ECONNRESET. Over a
 * real socket, on the raw path (a produce) and on `node:http` (a GET): the answer announces
 * `Keep-Alive: timeout=65`, and after 6 s idle the same connection answers the next request.
 * Node target only (`targets.ts`): Deno's and Bun's servers keep their own idle timeouts.
 */
import * as net from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker } from "./harness.ts";

const running: BrokerProcess[] = [];
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** Sends `request` on `socket` and resolves to the answer's head once a whole answer has arrived. */
function exchange(socket: net.Socket, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let got = "";
    const onData = (d: Buffer) => {
      got += d.toString("latin1");
      const end = got.indexOf("\r\n\r\n");
      if (end < 0) return;
      const length = Number(/content-length: *(\d+)/i.exec(got.slice(0, end))?.[1] ?? "0");
      if (got.length < end + 4 + length) return;
      socket.off("data", onData);
      socket.off("close", onClose);
      resolve(got.slice(0, end));
    };
    const onClose = () => reject(new Error(`connection closed; got ${JSON.stringify(got)}`));
    socket.on("data", onData);
    socket.once("close", onClose);
    socket.write(request);
  });
}

describe("HTTP keep-alive", () => {
  it("keeps an idle connection open past 5 s on the raw path and on node:http, and says so", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(`${dir}/data`);
    running.push(broker);
    const created = await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: '{"name":"t","partitions":1}',
    });
    expect(created.status).toBe(201);
    const url = new URL(broker.httpUrl);
    const socket = net.connect(Number(url.port), url.hostname);
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    const host = `Host: ${url.host}\r\n`;
    const records = '{"records":[{"value":"x"}]}';
    // Produces first (the raw path), then a GET (handed to node:http for the rest of the connection).
    const produce = `POST /v1/topics/t/records HTTP/1.1\r\n${host}Content-Type: application/json\r\nContent-Length: ${records.length}\r\n\r\n${records}`;
    const health = `GET /healthz HTTP/1.1\r\n${host}\r\n`;
    for (const [i, request] of [produce, produce, health, health].entries()) {
      const head = await exchange(socket, request);
      expect(head, `request ${i}`).toMatch(/^HTTP\/1\.1 200 /);
      expect(head).toMatch(/\r\nKeep-Alive: timeout=65(\r\n|$)/i);
      // Idle past node:http's 5 s (and the raw path's old 5–6 s) before the next request.
      if (i === 0 || i === 2) await new Promise((r) => setTimeout(r, 6_500));
    }
    socket.destroy();
  }, 60_000);
});
