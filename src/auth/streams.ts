/**
 * The Durable Streams operations (`broker/streams/`) as one principal may use them: the same role
 * table as the topic api (`auth/roles.ts`), checked against the topic that holds the stream
 * (`broker/streams/names.ts`), so a key's topic patterns cover streams by their topic names
 * (`chat/room-1` is the topic `chat.room-1`, matched by `chat.*`):
 *
 * | stream operation                          | as the topic operation | roles            |
 * |-------------------------------------------|------------------------|------------------|
 * | create (PUT; a fork too)                  | `create_topic`         | admin            |
 * | append, close (POST)                      | `produce`              | admin, producer  |
 * | read: catch-up, long-poll, SSE (GET)      | `fetch`                | admin, consumer  |
 * | metadata (HEAD)                           | `describe_topic`       | every role       |
 * | delete (DELETE)                           | `delete_topic`         | admin            |
 *
 * Live reads end when the principal stops being current (a revoked key), like long-poll fetches.
 * A key's `Producer-Id`s are its own namespace (`<key name>:<id>`), as for topics, so no key can
 * fence another key's producer. A path is validated first, so a malformed one is a 400 whatever
 * the key.
 */
import type { Principal } from "./principal.ts";
import type { Operation, RequestNames } from "./roles.ts";
import { streamTopicName, validateStreamPath } from "../broker/streams/names.ts";
import type {
  StreamAppendRequest,
  StreamAppendResult,
  StreamCreateRequest,
  StreamInfo,
  StreamReadRequest,
  StreamReadResult,
  Streams,
} from "../broker/streams/types.ts";
import { quote } from "../lib/quote.ts";

/** What {@link authorizedStreams} needs from the principal's broker view. */
export interface StreamGuard {
  principal: Principal;
  /** Throws unless the principal may perform `operation` on `names` (`AccessControl.check`). */
  check(operation: Operation, names: RequestNames, action: () => string): void;
  /** `signal` combined with the principal's revocation signal. */
  signal(signal: AbortSignal | undefined): AbortSignal;
  /** Logs an admin action. */
  audit(event: string, fields: Record<string, unknown>): void;
}

/** `inner` behind the role table (module comment). */
export function authorizedStreams(inner: Streams, guard: StreamGuard): Streams {
  const topicOf = (path: string) => streamTopicName(validateStreamPath(path));
  return {
    async create(request: StreamCreateRequest): Promise<{ created: boolean; info: StreamInfo }> {
      guard.check(
        "create_topic",
        { topic: topicOf(request.path) },
        () => `Cannot create stream ${quote(request.path)}`,
      );
      const result = await inner.create(request);
      if (result.created)
        guard.audit("audit.stream_created", {
          stream: request.path,
          topic: result.info.topic,
          fork: request.fork?.sourcePath,
        });
      return result;
    },
    append(request: StreamAppendRequest): Promise<StreamAppendResult> {
      guard.check(
        "produce",
        { topic: topicOf(request.path) },
        () => `Cannot append to stream ${quote(request.path)}`,
      );
      const producer = request.producer;
      if (producer === undefined || guard.principal.kind !== "key") return inner.append(request);
      // A key's Producer-Ids are its own, as for topics (`keyProducerId` in access.ts).
      return inner.append({
        ...request,
        producer: { ...producer, id: `${guard.principal.name}:${producer.id}` },
      });
    },
    read(request: StreamReadRequest): Promise<StreamReadResult> {
      guard.check(
        "fetch",
        { topic: topicOf(request.path) },
        () => `Cannot read stream ${quote(request.path)}`,
      );
      if (request.waitMs <= 0) return inner.read(request);
      return inner.read({ ...request, signal: guard.signal(request.signal) });
    },
    waitForData(request: {
      path: string;
      position: number;
      waitMs: number;
      signal?: AbortSignal;
    }): Promise<void> {
      guard.check(
        "fetch",
        { topic: topicOf(request.path) },
        () => `Cannot read stream ${quote(request.path)}`,
      );
      return inner.waitForData({ ...request, signal: guard.signal(request.signal) });
    },
    head(path: string): StreamInfo {
      guard.check(
        "describe_topic",
        { topic: topicOf(path) },
        () => `Cannot describe stream ${quote(path)}`,
      );
      return inner.head(path);
    },
    async delete(path: string): Promise<void> {
      guard.check(
        "delete_topic",
        { topic: topicOf(path) },
        () => `Cannot delete stream ${quote(path)}`,
      );
      await inner.delete(path);
      guard.audit("audit.stream_deleted", { stream: path });
    },
    cursor(clientCursor: string | undefined): string {
      return inner.cursor(clientCursor);
    },
  };
}
