/** Test helper: records the lengths of the `Uint8Array`s a piece of code allocates. */

/** Runs `fn` while recording the length of every `new Uint8Array(n)` (numeric length) made. */
export function recordingAllocations<T>(fn: () => T): { value: T; sizes: number[] } {
  const original = globalThis.Uint8Array;
  const sizes: number[] = [];
  globalThis.Uint8Array = new Proxy(original, {
    construct(target, args, newTarget) {
      if (typeof args[0] === "number") sizes.push(args[0]);
      return Reflect.construct(target, args, newTarget);
    },
  });
  try {
    return { value: fn(), sizes };
  } finally {
    globalThis.Uint8Array = original;
  }
}
