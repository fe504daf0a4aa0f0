/**
 * The close of a plain-HTTP connection refused at `--max-connections` (docs/operations.md
 * "Descriptors and connections"): `lib/connection-limit.ts`'s 503 answer, then the close.
 */
import type { Socket } from "node:net";
import { httpRefusalAnswer } from "../lib/connection-limit.ts";

/**
 * Longest a refused connection keeps its descriptor, in ms: the bound exists so that clients
 * cannot spend storage's descriptors, and a refused connection is outside its count.
 */
const refusedLingerMs = 100;

/**
 * Sends {@link httpRefusalAnswer} on `socket` and closes it as soon as the kernel has the answer
 * (or after {@link refusedLingerMs}), reading and dropping what the client sends meanwhile so
 * that the close is not a reset that could discard the answer.
 */
export function refuseHttp(socket: Socket): void {
  socket.on("error", () => {});
  socket.on("data", () => {});
  const linger = setTimeout(() => socket.destroy(), refusedLingerMs);
  linger.unref?.();
  socket.once("close", () => clearTimeout(linger));
  socket.end(httpRefusalAnswer, () => socket.destroy());
}
