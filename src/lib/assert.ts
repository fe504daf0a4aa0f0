/**
 * Assertions for programmer errors. A failed assertion means the code is wrong, not the input:
 * it throws an {@link AssertionError} that no caller is expected to handle. Operating errors
 * (bad requests, ENOSPC, corrupt files) are never reported through these.
 */

/** Thrown when an internal invariant does not hold. */
export class AssertionError extends Error {
  override name = "AssertionError";
}

/**
 * Throws {@link AssertionError} unless `condition` is truthy. One condition per call, so a failure
 * names exactly what broke.
 */
export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError(`assertion failed: ${message}`);
}

/** Marks a branch that must be unreachable; throws {@link AssertionError} if it is reached. */
export function unreachable(value: never, message = "unreachable"): never {
  throw new AssertionError(`${message}: ${String(value)}`);
}
