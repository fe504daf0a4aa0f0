/**
 * The close of a plain-HTTP connection refused at `--max-connections` (docs/operations.md
 * "Descriptors and connections"): `lib/connection-limit.ts`'s 503 answer, then the close.
 */
import type { Socket } from "node:net";
import { httpRefusalAnswer } from "../lib/connection-limit.ts";
import { tcpEndLingerMs } from "../lib/limits.ts";

/**
 * Sends {@link httpRefusalAnswer} on `socket` and ends it, reading (and dropping) what the client
 * sends meanwhile so that the close is not a reset that could discard the answer; destroyed after
 * `tcpEndLingerMs` if the client does not close.
 */
export function refuseHttp(socket: Socket): void {
  socket.on("error", () => {});
  socket.on("data", () => {});
  socket.end(httpRefusalAnswer);
  const linger = setTimeout(() => socket.destroy(), tcpEndLingerMs);
  linger.unref?.();
  socket.once("close", () => clearTimeout(linger));
}
