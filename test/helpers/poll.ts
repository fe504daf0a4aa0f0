/**
 * Polls `probe` every 100 ms until it gives a value other than undefined (a probe that throws
 * counts as undefined: the broker may be restarting), and returns that value.
 * @throws Error "timed out waiting for <what>" after `ms`.
 */
export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined>,
  ms = 20_000,
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await probe().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
