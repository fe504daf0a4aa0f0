/**
 * A {@link ColdStore} in memory for simulations: objects in a map, with a fault hook that can fail
 * (or "crash" at) any operation, counted, so a test can cut a cold swap after each of its steps.
 */
import {
  ColdStoreError,
  isValidObjectKey,
  type ColdObjectInfo,
  type ColdObjectSource,
  type ColdStore,
} from "../../src/storage/cold-objects.ts";

/** An operation of the store, as the fault hook sees it. */
export type ColdOp = "put" | "get" | "list" | "delete";

/** See the module comment. */
export class MemoryColdStore implements ColdStore {
  readonly location = "memory://cold/";
  readonly objects = new Map<string, Uint8Array>();
  /** Mutations (put, delete) done so far. */
  mutations = 0;
  /** Called before each operation; an error it returns is thrown instead of doing it. */
  fault: ((op: ColdOp, key: string) => Error | null) | null = null;

  /** Fails every mutation after the next `n` with an `unavailable` error (a crash of the broker, seen from the store). */
  cutAfterMutations(n: number): void {
    const stopAt = this.mutations + n;
    this.fault = (op) =>
      (op === "put" || op === "delete") && this.mutations >= stopAt
        ? new ColdStoreError("unavailable", "cut: the simulated broker stopped here")
        : null;
  }

  #check(op: ColdOp, key: string): void {
    const err = this.fault?.(op, key) ?? null;
    if (err !== null) throw err;
    if (op !== "list" && !isValidObjectKey(key))
      throw new ColdStoreError("invalid", `Invalid cold object key ${JSON.stringify(key)}`);
  }

  async put(key: string, source: ColdObjectSource): Promise<ColdObjectInfo> {
    this.#check("put", key);
    const bytes = new Uint8Array(source.sizeBytes);
    for (let at = 0; at < bytes.length; ) {
      const chunk = await source.read(at, Math.min(1 << 20, bytes.length - at));
      if (chunk.length === 0) throw new ColdStoreError("invalid", `source of "${key}" ended early`);
      bytes.set(chunk, at);
      at += chunk.length;
    }
    this.objects.set(key, bytes);
    this.mutations++;
    return { key, sizeBytes: bytes.length };
  }

  async get(key: string, range?: { start: number; end: number }): Promise<Uint8Array> {
    this.#check("get", key);
    const bytes = this.objects.get(key);
    if (bytes === undefined) throw new ColdStoreError("not_found", `No cold object "${key}"`);
    const start = range?.start ?? 0;
    const end = range?.end ?? bytes.length;
    if (!(Number.isSafeInteger(start) && Number.isSafeInteger(end) && 0 <= start && start <= end))
      throw new ColdStoreError("invalid", `invalid range [${start}, ${end})`);
    if (end > bytes.length)
      throw new ColdStoreError(
        "corrupt",
        `bytes [${start}, ${end}) asked, "${key}" holds ${bytes.length}`,
      );
    return bytes.slice(start, end);
  }

  async list(prefix: string): Promise<ColdObjectInfo[]> {
    this.#check("list", prefix);
    return [...this.objects]
      .filter(([k]) => k.startsWith(prefix))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([key, bytes]) => ({ key, sizeBytes: bytes.length }));
  }

  async delete(key: string): Promise<void> {
    this.#check("delete", key);
    if (this.objects.delete(key)) this.mutations++;
  }
}
