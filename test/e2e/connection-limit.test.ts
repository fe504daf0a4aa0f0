/**
 * End-to-end: `--max-connections` bounds the client connections open at once over the HTTP, TCP
 * and Kafka ports together (docs/operations.md "Descriptors and connections"): clients holding
 * half-sent HTTP heads fill it, a connection beyond it on any port is closed at once (on the
 * plain HTTP port after a 503 answer), the refusal is logged as `connection.refused`, and once a held connection closes a
 * request is served again. Node target: the bound is runtime code, and the listeners are the
 * same `node:net` ones there on every runtime but Bun's plain TCP and Deno's plain HTTP.
 */
import { afterEach, describe, expect, it } from "vitest";
import * as net from "node:net";
import { tempDir } from "../helpers/tmp.ts";
import { runCli, startBroker, target, type BrokerProcess } from "./harness.ts";

const running: BrokerProcess[] = [];
const sockets: net.Socket[] = [];
afterEach(async () => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

/** Opens a connection and sends `bytes`; resolves once it is connected. */
function hold(port: number, bytes: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: "127.0.0.1", port }, () => {
      socket.write(bytes);
      resolve(socket);
    });
    socket.on("error", reject);
    sockets.push(socket);
  });
}

/** Connects and resolves with what the server sent before closing it, or "open" after `ms`. */
function closedAtOnce(port: number, send: string, ms = 3000): Promise<string> {
  return new Promise((resolve) => {
    let got = "";
    const socket = net.connect({ host: "127.0.0.1", port }, () => socket.write(send));
    sockets.push(socket);
    const timer = setTimeout(() => resolve("open"), ms);
    socket.on("data", (d) => (got += d));
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(`closed:${got}`);
    });
  });
}

const halfHead = "GET /healthz HTTP/1.1\r\nHo";

describe(`[${target}] --max-connections`, () => {
  it.runIf(target === "node")(
    "closes connections beyond the bound on every port at once, logs them, and serves again once one closes",
    async () => {
      const { dir } = tempDir();
      const broker = await startBroker(`${dir}/data`, [
        "--max-connections",
        "3",
        "--kafka-port",
        "0",
      ]);
      running.push(broker);
      const httpPort = Number(new URL(broker.httpUrl).port);
      const held = [
        await hold(httpPort, halfHead),
        await hold(httpPort, halfHead),
        await hold(broker.tcp.port, ""),
      ];
      // Let the broker accept all three before the next one arrives.
      await new Promise((r) => setTimeout(r, 200));
      // Plain HTTP gets a 503 it can back off on, then the close (newuser14).
      const refusedHttp = await closedAtOnce(httpPort, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
      expect(refusedHttp).toMatch(/^closed:HTTP\/1\.1 503 Service Unavailable\r\n/);
      expect(refusedHttp).toContain("\r\nRetry-After: 1\r\n");
      expect(JSON.parse(refusedHttp.slice(refusedHttp.indexOf("\r\n\r\n") + 4))).toEqual({
        error: {
          code: "unavailable",
          message:
            "Cannot serve this connection: the broker is at its --max-connections bound; retry later",
        },
      });
      expect(await closedAtOnce(broker.tcp.port, "")).toBe("closed:");
      expect(await closedAtOnce(broker.kafka!.port, "")).toBe("closed:");
      await new Promise((r) => setTimeout(r, 100));
      const refused = broker
        .stderr()
        .split("\n")
        .filter((l) => l.includes('"connection.refused"'));
      // At most one line per 5 s: the first refusal at once, the others summed into the next.
      expect(refused).toHaveLength(1);
      expect(JSON.parse(refused[0])).toMatchObject({
        level: "warn",
        event: "connection.refused",
        listener: "http",
        max_connections: 3,
        refused: 1,
      });
      // The CLI, refused at the bound, names both causes of an unanswered close.
      const cli = await runCli(["topics", "list", "--broker", `127.0.0.1:${broker.tcp.port}`]);
      expect(cli.code).toBe(1);
      expect(cli.stderr).toMatch(/--max-connections bound, its log says so/);
      held[0].destroy();
      await new Promise((r) => setTimeout(r, 200));
      const res = await fetch(`${broker.httpUrl}/healthz`);
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    },
  );
});
