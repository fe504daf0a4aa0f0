/**
 * The CLI's reconnect loop (src/cli/reconnect.ts) says what happened in its first line: a lost
 * connection, or a retriable answer of the broker (attack13 F2: `unavailable` while etcd elected a
 * leader was reported as "connection to the broker lost").
 */
import { describe, expect, it } from "vitest";
import { ClientError, ClientErrorCodes } from "../../src/client/errors.ts";
import { Errors } from "../../src/broker/errors.ts";
import { reconnect } from "../../src/cli/reconnect.ts";

async function firstLine(cause: unknown): Promise<string[]> {
  const lines: string[] = [];
  const got = await reconnect(async () => "again", {
    cause,
    timeoutMs: 5000,
    stopped: () => false,
    write: (line) => lines.push(line),
  });
  expect(got).toBe("again");
  return lines;
}

describe("reconnect's first line", () => {
  it("names a retriable answer as such, with its code and message", async () => {
    const cause = ClientError.fromKind(
      Errors.unavailable,
      'Cannot replicate the offsets of group "G2": no answer within 5000 ms',
    );
    const lines = await firstLine(cause);
    expect(lines[0]).toBe(
      'es-broker: the broker answered unavailable, which a retry may fix (Cannot replicate the offsets of group "G2": no answer within 5000 ms): reconnecting for up to 5000 ms (--reconnect-timeout-ms)\n',
    );
    expect(lines[1]).toMatch(/^es-broker: reconnected after \d+ ms\n$/);
  });

  it("names a closed connection or a request that timed out a lost connection", async () => {
    for (const code of [ClientErrorCodes.connectionClosed, ClientErrorCodes.timeout]) {
      const lines = await firstLine(new ClientError(code, -1, true, "Connection closed"));
      expect(lines[0]).toBe(
        "es-broker: connection to the broker lost (Connection closed): reconnecting for up to 5000 ms (--reconnect-timeout-ms)\n",
      );
    }
  });
});

describe("reconnect and a stop signal", () => {
  it("returns at once when stopped during an attempt that does not end (newuser18 F10), closing it later", async () => {
    // An attempt that retries for long (a cluster client while every broker is down): before,
    // a first SIGTERM waited it out and only a second one ended consume --group --follow.
    let stop = false;
    let finish: (v: string) => void = () => {};
    const abandoned: string[] = [];
    const lines: string[] = [];
    const started = performance.now();
    const result = reconnect(() => new Promise<string>((resolve) => (finish = resolve)), {
      cause: new ClientError(ClientErrorCodes.connectionClosed, -1, true, "Connection closed"),
      timeoutMs: null,
      stopped: () => stop,
      write: (line) => lines.push(line),
      abandon: (late) => abandoned.push(late),
    });
    setTimeout(() => (stop = true), 200);
    expect(await result).toBeNull();
    expect(performance.now() - started).toBeLessThan(2000);
    expect(lines).toEqual(["es-broker: stop requested: no longer reconnecting\n"]);
    finish("late connection");
    await new Promise((r) => setTimeout(r, 10));
    expect(abandoned).toEqual(["late connection"]);
  });

  it("a key refused on the first attempt after a lost connection is key_revoked, with no reconnecting line", async () => {
    const lines: string[] = [];
    const refused = ClientError.fromKind(
      Errors.unauthenticated,
      "Cannot authenticate: API key 0123456789abcdef is not valid (unknown, revoked, or wrong secret)",
    );
    const err = await reconnect(
      async () => {
        throw refused;
      },
      {
        cause: new ClientError(ClientErrorCodes.connectionClosed, -1, true, "Connection closed"),
        timeoutMs: 5000,
        stopped: () => false,
        write: (line) => lines.push(line),
      },
    ).then(
      () => null,
      (e: unknown) => e as ClientError,
    );
    expect(err?.code).toBe("key_revoked");
    expect(err?.message).toMatch(/revoked or changed while the command ran/);
    expect(lines).toEqual([]);
  });
});
