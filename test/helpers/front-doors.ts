/**
 * The two front doors as one interface, so a scenario that must hold over both is written once
 * and run from a table against each (as Hono runs one suite on every adapter): HTTP through the
 * Hono app, TCP over a real loopback socket and the TypeScript client. Results come back in the
 * broker's own shapes (`src/broker/types.ts`, camelCase); each door checks its wire shape on the
 * way: the HTTP door asserts the success status, that every JSON field name is snake_case, and
 * nothing but the documented fields; errors of both doors become a {@link DoorError} carrying the
 * code, the details and (HTTP) the status, so a scenario asserts them alike.
 */
import { expect, onTestFinished } from "vitest";
import type { LocalBroker } from "../../src/broker/broker.ts";
import type {
  Broker,
  CommitOffsetsRequest,
  GroupAssignment,
  GroupDescription,
  HeartbeatResult,
  ProduceResult,
  ProducerIdentity,
} from "../../src/broker/types.ts";
import { ClientError, TcpClient } from "../../src/client/client.ts";
import { MemoryLogger } from "../../src/lib/logger.ts";
import { listenTcp } from "../../src/runtime/tcp.ts";
import { createHttpApp } from "../../src/transport/http/app.ts";
import { createTcpTransport } from "../../src/transport/tcp/transport.ts";
import { realClock } from "./clock.ts";

/** An error answer of either door. */
export class DoorError extends Error {
  constructor(
    readonly code: string,
    readonly details: Record<string, unknown> | undefined,
    /** The HTTP status; undefined over TCP. */
    readonly httpStatus: number | undefined,
    message: string,
  ) {
    super(message);
  }
}

/** The operations both doors offer, in the broker's shapes. */
export interface FrontDoor {
  name: "HTTP" | "TCP";
  joinGroup(
    group: string,
    request: { topics: string[]; sessionTimeoutMs?: number },
  ): Promise<GroupAssignment>;
  heartbeat(group: string, memberId: string, generation: number): Promise<HeartbeatResult>;
  commitOffsets(request: CommitOffsetsRequest): Promise<void>;
  describeGroup(group: string): Promise<GroupDescription>;
  listGroups(): Promise<GroupDescription[]>;
  leaveGroup(group: string, memberId: string): Promise<void>;
  /** Produces `values` (keyless) to one partition as `producer`. */
  produceIdempotent(
    topic: string,
    partition: number,
    values: string[],
    producer: ProducerIdentity,
  ): Promise<ProduceResult>;
  /** The producer id's next epoch (docs/decisions.md §20). */
  initProducerEpoch(producerId: string, atLeast?: number): Promise<number>;
}

/** How a door is opened over a broker. */
export interface DoorFactory {
  name: FrontDoor["name"];
  open(broker: LocalBroker): Promise<FrontDoor>;
}

/**
 * The rejection of `promise` as a {@link DoorError}, checked against `expected`: the code, the
 * details when given (`details`: these fields at least; `exactDetails`: exactly these), and over
 * HTTP the status when given.
 * @throws (fails the test) if the promise resolves or rejects with something else.
 */
export async function expectDoorError(
  promise: Promise<unknown>,
  expected: {
    code: string;
    http?: number;
    details?: Record<string, unknown>;
    exactDetails?: Record<string, unknown>;
  },
): Promise<DoorError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err, `expected ${expected.code}`).toBeInstanceOf(DoorError);
  const e = err as DoorError;
  expect(e.code, e.message).toBe(expected.code);
  if (expected.details !== undefined) expect(e.details).toMatchObject(expected.details);
  if (expected.exactDetails !== undefined) expect(e.details).toEqual(expected.exactDetails);
  if (expected.http !== undefined && e.httpStatus !== undefined)
    expect(e.httpStatus, `${expected.code} over HTTP`).toBe(expected.http);
  return e;
}

const snakeCase = /^[a-z][a-z0-9_]*$/;

/** Converts a JSON answer's field names to camelCase, asserting each is snake_case first. */
function fromWire(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(fromWire);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    expect(key, "HTTP field names are snake_case").toMatch(snakeCase);
    out[key.replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase())] = fromWire(v);
  }
  return out;
}

/** The HTTP door: the Hono app over the broker, called in process (`app.request`). */
export const httpDoor: DoorFactory = {
  name: "HTTP",
  async open(broker) {
    const app = createHttpApp({ broker, logger: new MemoryLogger() });
    const call = async (
      method: string,
      path: string,
      options: { body?: unknown; headers?: Record<string, string>; status: number },
    ): Promise<any> => {
      const res = await app.request(path, {
        method,
        headers: { "content-type": "application/json", ...options.headers },
        body: options.body === undefined ? undefined : JSON.stringify(options.body),
      });
      const text = await res.text();
      const body = text === "" ? null : JSON.parse(text);
      if (res.status >= 400) {
        expect(Object.keys(body)).toEqual(["error"]);
        const { code, message, details } = body.error;
        throw new DoorError(code, details, res.status, `${method} ${path}: ${message}`);
      }
      expect(res.status, `${method} ${path}`).toBe(options.status);
      if (options.status === 204) expect(body).toBeNull();
      return fromWire(body);
    };
    const members = (group: string) => `/v1/groups/${encodeURIComponent(group)}/members`;
    return {
      name: "HTTP",
      joinGroup: (group, request) =>
        call("POST", members(group), {
          body: { topics: request.topics, session_timeout_ms: request.sessionTimeoutMs },
          status: 200,
        }),
      heartbeat: (group, memberId, generation) =>
        call("POST", `${members(group)}/${memberId}/heartbeat`, {
          body: { generation },
          status: 200,
        }),
      async commitOffsets(request) {
        await call("POST", `/v1/groups/${encodeURIComponent(request.group)}/offsets`, {
          body: {
            member_id: request.memberId,
            generation: request.generation,
            offsets: request.offsets,
          },
          status: 204,
        });
      },
      describeGroup: (group) =>
        call("GET", `/v1/groups/${encodeURIComponent(group)}`, { status: 200 }),
      async listGroups() {
        const body = await call("GET", "/v1/groups", { status: 200 });
        expect(Object.keys(body)).toEqual(["groups"]);
        return body.groups;
      },
      async leaveGroup(group, memberId) {
        await call("DELETE", `${members(group)}/${memberId}`, { status: 204 });
      },
      async initProducerEpoch(producerId, atLeast) {
        const body = await call("POST", `/v1/producers/${encodeURIComponent(producerId)}/epoch`, {
          body: atLeast === undefined ? undefined : { at_least: atLeast },
          status: 200,
        });
        expect(Object.keys(body)).toEqual(["epoch"]);
        return body.epoch;
      },
      async produceIdempotent(topic, partition, values, producer) {
        const body = await call("POST", `/v1/topics/${encodeURIComponent(topic)}/records`, {
          body: { records: values.map((value) => ({ value, partition })) },
          headers: {
            "Producer-Id": producer.id,
            "Producer-Epoch": String(producer.epoch),
            "Producer-Seq": String(producer.sequence),
          },
          status: 200,
        });
        // HTTP answers one offset per record; the broker's shape is one span per partition.
        expect(Object.keys(body).sort()).toEqual(["duplicate", "offsets"]);
        const offsets = body.offsets as { partition: number; offset: number }[];
        expect(offsets).toHaveLength(values.length);
        const spans: ProduceResult["spans"] = [];
        for (const o of offsets) {
          const last = spans.at(-1);
          if (last?.partition === o.partition && last.baseOffset + last.count === o.offset)
            last.count++;
          else spans.push({ partition: o.partition, baseOffset: o.offset, count: 1 });
        }
        return { spans, duplicate: body.duplicate };
      },
    };
  },
};

/**
 * A TCP transport over `broker` on a loopback port, stopped when the test finishes; `connect()`
 * opens a client to it (closed first).
 */
export async function serveTcp(
  broker: Broker,
): Promise<{ port: number; connect: () => Promise<TcpClient> }> {
  const transport = createTcpTransport({ broker, clock: realClock, logger: new MemoryLogger() });
  const listener = await listenTcp({ host: "127.0.0.1", port: 0 }, (socket) =>
    transport.handleConnection(socket),
  );
  onTestFinished(async () => {
    const stopped = listener.close();
    await transport.close({ graceMs: 500 });
    await stopped;
  });
  return {
    port: listener.port,
    connect: async () => {
      const client = await TcpClient.connect({ host: "127.0.0.1", port: listener.port });
      onTestFinished(() => client.close());
      return client;
    },
  };
}

/** Runs `call`, turning a {@link ClientError} into a {@link DoorError}. */
async function overTcp<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    if (err instanceof ClientError)
      throw new DoorError(err.code, err.details, undefined, err.message);
    throw err;
  }
}

/** The TCP door: one client over a real loopback socket. */
export const tcpDoor: DoorFactory = {
  name: "TCP",
  async open(broker) {
    const client = await (await serveTcp(broker)).connect();
    return {
      name: "TCP",
      joinGroup: (group, request) => overTcp(() => client.joinGroup({ group, ...request })),
      heartbeat: (group, memberId, generation) =>
        overTcp(() => client.heartbeat({ group, memberId, generation })),
      commitOffsets: (request) => overTcp(() => client.commitOffsets(request)),
      describeGroup: (group) => overTcp(() => client.describeGroup(group)),
      listGroups: () => overTcp(() => client.listGroups()),
      leaveGroup: (group, memberId) => overTcp(() => client.leaveGroup({ group, memberId })),
      initProducerEpoch: (producerId, atLeast) =>
        overTcp(() => client.initProducerEpoch(producerId, { atLeast })),
      produceIdempotent: (topic, partition, values, producer) =>
        overTcp(() =>
          client.produceIdempotent(
            topic,
            values.map((value) => ({ value })),
            { partition, producer },
          ),
        ),
    };
  },
};

/** Both doors, for `describe.each`-style tables. */
export const frontDoors: readonly DoorFactory[] = [httpDoor, tcpDoor];
