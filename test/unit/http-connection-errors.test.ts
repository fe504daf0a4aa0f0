import { afterEach, describe, expect, it } from "vitest";
import * as http from "node:http";
import * as net from "node:net";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { RefusalLog } from "../../src/lib/refusals.ts";
import { systemClock } from "../../src/runtime/clock.ts";
import { answerConnectionErrorsInOrder } from "../../src/runtime/http-connection-errors.ts";

const open: { close(): void }[] = [];
afterEach(() => {
  for (const o of open.splice(0)) o.close();
});

describe("http.parse_error log lines", () => {
  it("name the peer read at accept even when the socket has closed by the time of the fault", async () => {
    const logger = new MemoryLogger();
    const refusals = new RefusalLog({ logger, clock: systemClock });
    const server = http.createServer();
    answerConnectionErrorsInOrder(server, refusals);
    const accepted = new Promise<net.Socket>((resolve) => server.once("connection", resolve));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    open.push({ close: () => server.close() });
    const client = net.connect((server.address() as net.AddressInfo).port, "127.0.0.1");
    open.push({ close: () => client.destroy() });
    client.on("error", () => {});
    await new Promise<void>((resolve) => client.once("connect", resolve));
    const socket = await accepted;
    // What happens under a reset storm: the connection is gone before `node:http` reports the
    // parse error of what it had read (attack17 F7). Nothing read the address before.
    socket.destroy();
    await new Promise((resolve) => socket.once("close", resolve));
    expect(socket.destroyed).toBe(true);
    server.emit(
      "clientError",
      Object.assign(new Error("Parse Error: Invalid EOF state"), { code: "HPE_INVALID_EOF_STATE" }),
      socket,
    );
    expect(logger.named("http.parse_error")).toEqual([
      expect.objectContaining({
        remote: `127.0.0.1:${client.localPort}`,
        parser_error: "HPE_INVALID_EOF_STATE",
      }),
    ]);
    refusals.flush();
  });
});
