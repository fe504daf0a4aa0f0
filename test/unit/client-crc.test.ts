/**
 * The TCP client checks fetched records with the runtime's native CRC-32 without being told to
 * (`src/client/crc.ts`): a user's process gets the check the CLI and the benchmark's consumer get.
 * This file has a module state of its own, so nothing else installed it first.
 */
import * as net from "node:net";
import * as zlib from "node:zlib";
import { describe, expect, it } from "vitest";
import { TcpClient } from "../../src/client/client.ts";
import { crc32, crc32IsNative } from "../../src/lib/crc32.ts";

describe("TcpClient.connect", () => {
  it("installs the runtime's native CRC-32, with the same values as the portable one", async () => {
    expect(crc32IsNative()).toBe(false);
    const before = crc32(new TextEncoder().encode("x".repeat(4096)));
    const server = net.createServer((socket) => socket.on("error", () => {}));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as net.AddressInfo;
    try {
      const client = await TcpClient.connect({ host: "127.0.0.1", port });
      await client.close();
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
    const hasNative = typeof (zlib as { crc32?: unknown }).crc32 === "function";
    expect(crc32IsNative()).toBe(hasNative);
    expect(crc32(new TextEncoder().encode("x".repeat(4096)))).toBe(before);
  });
});
