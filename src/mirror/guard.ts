/**
 * Keeps clients out of the mirror's own consumer group (docs/edge.md "Exactly once"): the group
 * `mirror.<name>` holds the mirror's durable position, committed by the mirror alone. A client
 * that joined it made every commit of the mirror fail ("the group has 1 member") — the position
 * then stood still while the upstream moved on, so the group's lag, retention's hold
 * (`mirror_hold_retention`) and a restart's resume point were all behind — and a client's commit
 * could move the position itself.
 */
import { BrokerError, Errors } from "../broker/errors.ts";
import type { Broker } from "../broker/types.ts";
import { quote } from "../lib/quote.ts";

/** Broker calls that change a consumer group (HTTP, TCP and Kafka group APIs all come here). */
const groupChanges = new Set([
  "joinGroup",
  "heartbeat",
  "leaveGroup",
  "commitOffsets",
  "joinAssignedGroup",
  "syncAssignedGroup",
  "heartbeatAssignedGroup",
]);

/**
 * `broker` as a front door sees it while a mirror runs: the calls of {@link groupChanges} naming
 * `group` fail with `forbidden` (`details.reason` `mirror_group`); everything else, describing
 * the group included, passes through. The mirror itself uses the unwrapped broker.
 */
export function guardMirrorGroup<B extends Broker>(broker: B, group: string): B {
  // Methods are bound to the broker itself: its private fields are not the proxy's.
  const bound = new Map<string | symbol, unknown>();
  return new Proxy(broker, {
    get(target, property) {
      const value: unknown = Reflect.get(target, property, target);
      if (typeof value !== "function") return value;
      let method = bound.get(property);
      if (method === undefined) {
        const call = value as (request: { group?: unknown }) => Promise<unknown>;
        method =
          typeof property === "string" && groupChanges.has(property)
            ? (request: { group?: unknown }) =>
                request?.group === group
                  ? Promise.reject(
                      new BrokerError(
                        Errors.forbidden,
                        `Cannot change consumer group ${quote(group)}: it holds the position of the store-and-forward mirror, which alone commits to it (docs/edge.md)`,
                        { reason: "mirror_group" },
                      ),
                    )
                  : call.call(target, request)
            : call.bind(target);
        bound.set(property, method);
      }
      return method;
    },
  });
}
