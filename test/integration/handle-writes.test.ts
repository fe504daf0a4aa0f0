/**
 * Direct writes on a Node TCP socket's handle (`src/client/handle-writes.ts`), over real loopback
 * sockets: what the broker's answers and the client's requests go through on Node. Writes the
 * kernel takes at once, writes that must wait in libuv's queue while the peer does not read,
 * ordering across both, drain, and a peer that resets the connection.
 */
import * as net from "node:net";
import { createHash } from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { HandleWrites, handleWritesAvailable } from "../../src/client/handle-writes.ts";

/** A connected pair: `client` (ours, written directly) and `server` (the peer, paused). */
async function pair(): Promise<{ client: net.Socket; server: net.Socket; close(): void }> {
  let accepted: (s: net.Socket) => void = () => {};
  const serverSide = new Promise<net.Socket>((resolve) => (accepted = resolve));
  const listener = net.createServer({ pauseOnConnect: true }, (s) => accepted(s));
  await new Promise<void>((resolve) => listener.listen(0, "127.0.0.1", resolve));
  const port = (listener.address() as net.AddressInfo).port;
  const client = net.connect({ host: "127.0.0.1", port });
  await new Promise<void>((resolve, reject) => {
    client.once("connect", resolve);
    client.once("error", reject);
  });
  const server = await serverSide;
  return {
    client,
    server,
    close() {
      client.destroy();
      server.destroy();
      listener.close();
    },
  };
}

/** Reads everything `server` receives until `bytes` have arrived. */
function readAll(server: net.Socket, bytes: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let got = 0;
    server.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      got += chunk.length;
      if (got >= bytes) resolve(Buffer.concat(chunks));
    });
    server.once("error", reject);
    server.once("close", () => reject(new Error(`closed after ${got} of ${bytes} bytes`)));
    server.resume();
  });
}

/** `n` bytes of a pattern that differs per `seed` (so misordered chunks show). */
function chunk(n: number, seed: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i++) b[i] = (i * 31 + seed * 7) & 0xff;
  return b;
}

const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

describe.runIf(handleWritesAvailable())("HandleWrites", () => {
  let cleanup: (() => void) | null = null;
  afterEach(() => {
    cleanup?.();
    cleanup = null;
  });

  it("writes small chunks at once, in order, calling onWritten before write returns", async () => {
    const p = await pair();
    cleanup = p.close;
    const w = new HandleWrites(p.client);
    const sent: Uint8Array[] = [];
    let written = 0;
    for (let i = 0; i < 50; i++) {
      const parts = [chunk(10 + i, i), chunk(3, i + 100)];
      sent.push(...parts);
      const before = written;
      expect(w.write(i % 2 === 0 ? parts.slice(0, 1) : parts, () => written++)).toBe(true);
      expect(written).toBe(before + 1);
      if (i % 2 === 0) sent.pop();
    }
    const total = sent.reduce((n, b) => n + b.length, 0);
    const got = await readAll(p.server, total);
    expect(sha(got)).toBe(sha(Buffer.concat(sent)));
  });

  it("queues what the kernel does not take while the peer does not read, keeps order, and drains", async () => {
    const p = await pair();
    cleanup = p.close;
    let drains = 0;
    const w = new HandleWrites(p.client, () => drains++);
    const sent: Uint8Array[] = [];
    const writtenAt: number[] = [];
    let refusedAt = -1;
    // 64 writes of 256 KiB (16 MiB): far more than the two socket buffers hold.
    for (let i = 0; i < 64; i++) {
      const c = chunk(256 * 1024, i);
      sent.push(c);
      const ok = w.write([c], () => writtenAt.push(i));
      if (!ok && refusedAt < 0) refusedAt = i;
    }
    expect(refusedAt).toBeGreaterThanOrEqual(0);
    // Not all of it can have been written yet: the peer has read nothing.
    expect(writtenAt.length).toBeLessThan(64);
    expect(drains).toBe(0);
    const got = await readAll(p.server, 64 * 256 * 1024);
    expect(got.length).toBe(64 * 256 * 1024);
    expect(sha(got)).toBe(sha(Buffer.concat(sent)));
    await new Promise((resolve) => setImmediate(resolve));
    expect(writtenAt).toEqual(Array.from({ length: 64 }, (_, i) => i));
    expect(drains).toBe(1);
    // Writes after the drain go at once again.
    let now = false;
    expect(w.write([chunk(100, 99)], () => (now = true))).toBe(true);
    expect(now).toBe(true);
  });

  it("destroys the socket when the peer has reset it, without throwing", async () => {
    const p = await pair();
    cleanup = p.close;
    const w = new HandleWrites(p.client);
    const closed = new Promise<void>((resolve) => p.client.once("close", () => resolve()));
    p.client.on("error", () => {});
    p.server.resetAndDestroy();
    await new Promise((resolve) => setTimeout(resolve, 50));
    let written = 0;
    for (let i = 0; i < 20 && !p.client.destroyed; i++) w.write([chunk(1000, i)], () => written++);
    expect(p.client.destroyed).toBe(true);
    await closed;
    // Once destroyed (no handle), further writes are ignored.
    expect(w.write([chunk(10, 1)], () => written++)).toBe(true);
  });
});
