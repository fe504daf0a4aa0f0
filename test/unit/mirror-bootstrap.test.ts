/**
 * The mirror's bootstrap list (src/mirror/bootstrap.ts, docs/edge.md "An upstream cluster"): the
 * first broker that connects serves, the last one that did is tried first, a refused key is not
 * tried elsewhere, and a failure of all names each broker and why.
 */
import { describe, expect, it } from "vitest";
import type { TcpClient } from "../../src/client/client.ts";
import { ClientError } from "../../src/client/errors.ts";
import { BootstrapConnector } from "../../src/mirror/bootstrap.ts";

const refused = (address: string) =>
  ClientError.connectionClosed(
    `Cannot connect to ${address}: connect ECONNREFUSED`,
    Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" }),
  );

/** A connector over `up` (the addresses that connect), recording every try. */
function connector(addresses: string[], up: Set<string>, tries: string[]) {
  return new BootstrapConnector(addresses, async (address) => {
    tries.push(address);
    if (!up.has(address)) throw refused(address);
    return { address } as unknown as TcpClient;
  });
}

describe("the mirror's bootstrap brokers", () => {
  it("connects to the first that answers, and goes back to it first", async () => {
    const tries: string[] = [];
    const up = new Set(["b:2", "c:3"]);
    const boot = connector(["a:1", "b:2", "c:3"], up, tries);
    expect(boot.address).toBe("a:1,b:2,c:3");
    expect(await boot.connect()).toEqual({ address: "b:2" });
    expect(tries).toEqual(["a:1", "b:2"]);
    expect(boot.address).toBe("b:2");
    tries.length = 0;
    await boot.connect();
    expect(tries).toEqual(["b:2"]);
    // b goes down: c next, then a (wrapping), never b twice.
    up.delete("b:2");
    tries.length = 0;
    expect(await boot.connect()).toEqual({ address: "c:3" });
    expect(tries).toEqual(["b:2", "c:3"]);
  });

  it("names every broker and why when none connects, keeping the code", async () => {
    const tries: string[] = [];
    const boot = connector(["a:1", "b:2"], new Set(), tries);
    const error = await boot.connect().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ClientError);
    expect(error).toMatchObject({
      code: "connection_closed",
      retriable: true,
      message:
        "Cannot connect to any of the 2 --mirror-to brokers: a:1 (ECONNREFUSED), b:2 (ECONNREFUSED)",
    });
    expect(boot.address).toBe("a:1,b:2");
    // One broker: its own error, as before the list.
    const one = await connector(["a:1"], new Set(), [])
      .connect()
      .catch((e: unknown) => e);
    expect((one as Error).message).toBe("Cannot connect to a:1: connect ECONNREFUSED");
  });

  it("does not try another broker after a refused key", async () => {
    const tries: string[] = [];
    const boot = new BootstrapConnector(["a:1", "b:2"], async (address) => {
      tries.push(address);
      throw new ClientError(
        "unauthenticated",
        16,
        false,
        "Cannot authenticate: API key x is not valid",
      );
    });
    await expect(boot.connect()).rejects.toMatchObject({ code: "unauthenticated" });
    expect(tries).toEqual(["a:1"]);
  });

  it("refuses an empty list", () => {
    expect(() => new BootstrapConnector([], async () => ({}) as TcpClient)).toThrow(
      "no bootstrap broker given",
    );
  });
});
