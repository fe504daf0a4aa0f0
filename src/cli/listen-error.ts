/**
 * Start-up messages for a port `serve` cannot listen on (README "Quick start", `serve --help`):
 * the runtime's own text ("listen EADDRINUSE: address already in use 127.0.0.1:8080") names
 * neither the listener nor the option that moves it.
 */

/** Which of `serve`'s listeners failed, and the option that sets its port. */
export interface ListenerName {
  /** Shown in the message: "HTTP", "TCP", "Kafka", "metrics". */
  listener: string;
  /** The `serve` option that picks the port, e.g. "--http-port". */
  option: string;
  host: string;
  port: number;
}

/**
 * Returns an Error naming the listener, its address and what to do when `err` is "address in
 * use" (Node and Bun: code EADDRINUSE; Deno: Deno.errors.AddrInUse) or "permission denied"
 * (EACCES / PermissionDenied, e.g. a port below 1024); any other error is returned unchanged.
 */
export function listenFailure(err: unknown, where: ListenerName): unknown {
  if (!(err instanceof Error)) return err;
  const code = (err as { code?: unknown }).code;
  const address = `${where.host.includes(":") ? `[${where.host}]` : where.host}:${where.port}`;
  const head = `Cannot listen for ${where.listener} on ${address}`;
  if (
    code === "EADDRINUSE" ||
    err.name === "AddrInUse" ||
    /address already in use/i.test(err.message)
  )
    return new Error(
      `${head}: the address is in use (another es-broker, or another program, holds the port); stop that process, or pick another port with ${where.option} PORT (0 = any free port)`,
    );
  if (
    code === "EACCES" ||
    err.name === "PermissionDenied" ||
    /permission denied/i.test(err.message)
  )
    return new Error(
      `${head}: permission denied (ports below 1024 need privileges); pick another port with ${where.option} PORT`,
    );
  return err;
}
