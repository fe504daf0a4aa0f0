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
