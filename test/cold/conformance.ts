/**
 * The one ColdStore conformance suite (src/storage/cold-objects.ts): every implementation — the
 * directory store, the S3 store against a real S3-compatible server, the tests' memory store —
 * runs these same tests, so the simulated store cannot drift from the real ones. Call
 * {@link coldStoreConformance} from a `*.test.ts` file with a factory for a fresh, empty store.
 */
import { describe, expect, it } from "vitest";
import { bytesEqual } from "../../src/lib/bytes.ts";
import {
  bytesSource,
  isColdStoreError,
  type ColdStore,
  type ColdStoreErrorKind,
} from "../../src/storage/cold-objects.ts";

/** A fresh, empty store. */
export interface ColdConformanceFixture {
  store: ColdStore;
  cleanup(): Promise<void>;
}

/** Deterministic bytes, different for each `seed`. */
export function patternBytes(length: number, seed = 1): Uint8Array {
  const out = new Uint8Array(length);
  let x = seed * 2654435761;
  for (let i = 0; i < length; i++) {
    x = (x * 1103515245 + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

async function expectKind(promise: Promise<unknown>, kind: ColdStoreErrorKind): Promise<void> {
  let caught: unknown;
  try {
    await promise;
  } catch (err) {
    caught = err;
  }
  expect(isColdStoreError(caught), `expected a ColdStoreError ${kind}, got ${String(caught)}`).toBe(
    true,
  );
  expect((caught as { kind: string }).kind).toBe(kind);
}

/**
 * Registers the suite. `largeObjectBytes` is a size the store uploads differently (in parts, for
 * S3); `pagedListing` says the store pages its listings below the count used here.
 */
export function coldStoreConformance(
  name: string,
  make: () => Promise<ColdConformanceFixture>,
  options: { largeObjectBytes?: number } = {},
): void {
  const withStore = (fn: (store: ColdStore) => Promise<void>) => async () => {
    const f = await make();
    try {
      await fn(f.store);
    } finally {
      await f.cleanup();
    }
  };

  describe(`ColdStore conformance: ${name}`, () => {
    it(
      "put stores bytes that get returns whole and by range, and reports the size",
      withStore(async (store) => {
        const bytes = patternBytes(100_000, 7);
        expect(await store.put("topics/t/0/00000000000000000000.log", bytesSource(bytes))).toEqual({
          key: "topics/t/0/00000000000000000000.log",
          sizeBytes: 100_000,
        });
        expect(await store.get("topics/t/0/00000000000000000000.log")).toEqual(bytes);
        expect(
          await store.get("topics/t/0/00000000000000000000.log", { start: 99_990, end: 100_000 }),
        ).toEqual(bytes.subarray(99_990));
        expect(
          await store.get("topics/t/0/00000000000000000000.log", { start: 5, end: 5 }),
        ).toEqual(new Uint8Array(0));
      }),
    );

    it(
      "stores an empty object",
      withStore(async (store) => {
        await store.put("a/empty", bytesSource(new Uint8Array(0)));
        expect(await store.get("a/empty")).toEqual(new Uint8Array(0));
        expect(await store.list("a/")).toEqual([{ key: "a/empty", sizeBytes: 0 }]);
      }),
    );

    it(
      "put replaces an object under the same key",
      withStore(async (store) => {
        await store.put("k/x", bytesSource(patternBytes(10, 1)));
        await store.put("k/x", bytesSource(patternBytes(20, 2)));
        expect(await store.get("k/x")).toEqual(patternBytes(20, 2));
      }),
    );

    it(
      "get of a missing object is not_found; a range past the end is refused, never answered short",
      withStore(async (store) => {
        await expectKind(store.get("nope/x"), "not_found");
        await store.put("k/x", bytesSource(patternBytes(10)));
        let caught: unknown;
        try {
          await store.get("k/x", { start: 5, end: 11 });
        } catch (err) {
          caught = err;
        }
        expect(isColdStoreError(caught)).toBe(true);
        await expectKind(store.get("k/x", { start: 6, end: 5 }), "invalid");
      }),
    );

    it(
      "list returns every object under a prefix, in key order, with sizes, and nothing outside it",
      withStore(async (store) => {
        const keys = ["p/1/b", "p/1/a", "p/10/a", "p/2", "q/1/a"];
        for (const [i, k] of keys.entries()) await store.put(k, bytesSource(patternBytes(i + 1)));
        expect(await store.list("p/1/")).toEqual([
          { key: "p/1/a", sizeBytes: 2 },
          { key: "p/1/b", sizeBytes: 1 },
        ]);
        expect((await store.list("p/")).map((o) => o.key)).toEqual([
          "p/1/a",
          "p/1/b",
          "p/10/a",
          "p/2",
        ]);
        expect(await store.list("none/")).toEqual([]);
      }),
    );

    it(
      "a listing of many objects is complete",
      withStore(async (store) => {
        const keys = Array.from({ length: 25 }, (_, i) => `many/${String(i).padStart(3, "0")}`);
        await Promise.all(keys.map((k) => store.put(k, bytesSource(patternBytes(3)))));
        expect((await store.list("many/")).map((o) => o.key)).toEqual(keys);
      }),
    );

    it(
      "delete removes an object, and deleting a missing one succeeds",
      withStore(async (store) => {
        await store.put("d/x", bytesSource(patternBytes(4)));
        await store.delete("d/x");
        await expectKind(store.get("d/x"), "not_found");
        await store.delete("d/x");
        expect(await store.list("d/")).toEqual([]);
      }),
    );

    it(
      "refuses malformed keys as invalid",
      withStore(async (store) => {
        for (const key of ["", "a//b", "../x", "a/./b", "/abs"])
          await expectKind(store.put(key, bytesSource(patternBytes(1))), "invalid");
      }),
    );

    if (options.largeObjectBytes !== undefined) {
      const size = options.largeObjectBytes;
      it(
        `stores a large object (${size} bytes) byte for byte, read back in ranges`,
        withStore(async (store) => {
          const bytes = patternBytes(size, 3);
          let reads = 0;
          await store.put("big/obj", {
            sizeBytes: size,
            read: async (position, length) => {
              reads++;
              return bytes.subarray(position, position + length);
            },
          });
          expect(reads).toBeGreaterThan(0);
          const mid = Math.floor(size / 2);
          expect(await store.get("big/obj", { start: mid - 10, end: mid + 10 })).toEqual(
            bytes.subarray(mid - 10, mid + 10),
          );
          // bytesEqual: toEqual walks a large array element by element, for minutes.
          expect(bytesEqual(await store.get("big/obj"), bytes)).toBe(true);
        }),
      );
    }
  });
}
