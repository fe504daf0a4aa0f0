/**
 * Request order for the appends of one `node:http` connection (docs/http-api.md, "Malformed
 * requests and pipelining"). `node:http` hands pipelined requests to the app as soon as they are
 * parsed, so their handlers run side by side: a produce whose body is whole at once (the fast
 * route) would reach the broker before an earlier one whose body is still arriving or that goes
 * through the router, and be stored before it.
 *
 * So each request other than GET and HEAD takes a {@link AppendTurn} when it arrives, in request
 * order, on its connection's chain. A produce makes its broker call through {@link AppendTurn.run}:
 * the call starts once every earlier turn is released, and releases its own turn as soon as it is
 * made (not when its fsync ends: pipelined produces still share fsyncs). A request that makes no
 * such call releases its turn when its answer is done (written, or the connection closed). GET and
 * HEAD take no turn: a long-poll fetch must not hold back a later produce it may be waiting for.
 *
 * The raw path (`http-raw.ts`) needs no chain: it calls the broker synchronously, in request order,
 * and hands a connection to `node:http` only once every answer it owes is written.
 */

/** One request's place on its connection's chain (module comment). */
export class AppendTurn {
  #previous: AppendTurn | null;
  #released = false;
  /** Called once released (turns after this one waiting); null while none waits. */
  #waiters: (() => void)[] | null = null;

  /** A turn after `previous` (null: the connection's first, or every earlier one released). */
  constructor(previous: AppendTurn | null) {
    this.#previous = previous?.released ? null : previous;
  }

  /** True once this turn and every earlier one are released. */
  get released(): boolean {
    return this.#released;
  }

  /**
   * Calls `call` once every earlier turn is released, then releases this one (right after `call`
   * returned, i.e. once the broker call is made, not when it settles). Synchronous when nothing
   * earlier is pending, so the common case costs no extra turn of the event loop.
   * @returns what `call` returns; a throw of `call` is the returned promise's rejection.
   */
  run<T>(call: () => Promise<T>): Promise<T> {
    const previous = this.#previous;
    if (previous === null || previous.#released) return this.#callThenRelease(call);
    return new Promise<void>((resolve) => previous.#wait(resolve)).then(() =>
      this.#callThenRelease(call),
    );
  }

  /**
   * Releases this turn (no broker call is coming, or the answer is done): at once if every
   * earlier turn is released, else once they are, so "released" always covers the earlier ones.
   */
  release(): void {
    if (this.#released) return;
    const previous = this.#previous;
    if (previous === null || previous.#released) this.#markReleased();
    else previous.#wait(() => this.#markReleased());
  }

  #callThenRelease<T>(call: () => Promise<T>): Promise<T> {
    try {
      return call();
    } catch (err) {
      return Promise.reject(err);
    } finally {
      this.#markReleased();
    }
  }

  #wait(then: () => void): void {
    (this.#waiters ??= []).push(then);
  }

  #markReleased(): void {
    if (this.#released) return;
    this.#released = true;
    this.#previous = null;
    const waiters = this.#waiters;
    this.#waiters = null;
    if (waiters !== null) for (const then of waiters) then();
  }
}

/** The last turn taken per connection (its socket), to chain the next one after. */
const lastTurns = new WeakMap<object, AppendTurn>();

/**
 * The turn of a request arriving now on `connection` (its socket), or null for a GET or HEAD,
 * which takes none (module comment). The caller releases it when the request's answer is done.
 */
export function takeAppendTurn(connection: object, method: string | undefined): AppendTurn | null {
  if (method === "GET" || method === "HEAD") return null;
  const turn = new AppendTurn(lastTurns.get(connection) ?? null);
  lastTurns.set(connection, turn);
  return turn;
}
