/** Shared argument helpers for the CLI: typed option parsing with errors that name the option. */

/** A mistake in the command line; the CLI prints it with the usage hint and exits 2. */
export class UsageError extends Error {
  override name = "UsageError";
}

/**
 * Parses an integer option value. `undefined` gives `fallback`.
 * @throws UsageError naming the option and the allowed range.
 */
export function intOption(name: string, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!/^-?\d+$/.test(value)) throw new UsageError(`--${name} must be an integer, got ${JSON.stringify(value)}`);
  const n = Number(value);
  if (!Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`--${name} must be from ${min} to ${max}, got ${value}`);
  return n;
}

/** Parses `host:port` (IPv6 as `[::1]:9092`). @throws UsageError. */
export function hostPort(name: string, value: string): { host: string; port: number } {
  const m = /^(?:\[([^\]]+)\]|([^:]+)):(\d+)$/.exec(value);
  if (!m) throw new UsageError(`--${name} must be host:port, got ${JSON.stringify(value)}`);
  const port = Number(m[3]);
  if (port < 1 || port > 65535) throw new UsageError(`--${name} port must be from 1 to 65535, got ${m[3]}`);
  return { host: m[1] ?? m[2], port };
}

/** True for addresses that only this machine can reach. */
export function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\./.test(host);
}
