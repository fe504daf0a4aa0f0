/**
 * The process's side of `GET /metrics` (docs/operations.md "Metrics"), the same on Node, Deno and
 * Bun: memory and CPU through `process.memoryUsage()` / `process.cpuUsage()`, the monotonic clock
 * of {@link MetricsRegistry} through `performance.now()`, and the event-loop delay by a probe — a
 * timer every `eventLoopProbeMs` whose lateness is observed into `esb_event_loop_delay_seconds`
 * (`perf_hooks.monitorEventLoopDelay` is not on every runtime; a late timer is).
 */
import type { Metrics } from "../lib/metrics.ts";
import { MetricsRegistry } from "../lib/metrics.ts";
import { eventLoopProbeMs } from "../lib/limits.ts";
import type { ProcessSnapshot } from "../transport/http/prometheus.ts";

/** A registry whose durations come from `performance.now()`. */
export function createMetricsRegistry(): MetricsRegistry {
  return new MetricsRegistry({ nowSeconds: () => performance.now() / 1000 });
}

/** When this module was loaded (ms since the epoch): close enough to the process's start. */
const loadedMs = Date.now() - performance.now();

/** Reads the process's memory, CPU and age now. */
export function processSnapshot(): ProcessSnapshot {
  const memory = process.memoryUsage();
  let cpuSeconds: number | null = null;
  try {
    const cpu = process.cpuUsage();
    cpuSeconds = (cpu.user + cpu.system) / 1e6;
  } catch {
    cpuSeconds = null;
  }
  return {
    residentMemoryBytes: memory.rss,
    heapUsedBytes: memory.heapUsed,
    heapTotalBytes: memory.heapTotal,
    externalMemoryBytes: memory.external,
    cpuSeconds,
    startTimeSeconds: loadedMs / 1000,
    uptimeSeconds: performance.now() / 1000,
  };
}

/**
 * Starts the event-loop delay probe (module comment); the timer does not keep the process alive.
 * @returns a function that stops it.
 */
export function startEventLoopProbe(metrics: Metrics): () => void {
  const delay = metrics.histogram("esb_event_loop_delay_seconds");
  let expected = performance.now() + eventLoopProbeMs;
  let timer: ReturnType<typeof setTimeout> | null = null;
  const tick = () => {
    const now = performance.now();
    delay.observe(Math.max(0, now - expected) / 1000);
    expected = now + eventLoopProbeMs;
    timer = setTimeout(tick, eventLoopProbeMs);
    (timer as { unref?: () => void }).unref?.();
  };
  timer = setTimeout(tick, eventLoopProbeMs);
  (timer as { unref?: () => void }).unref?.();
  return () => {
    if (timer !== null) clearTimeout(timer);
    timer = null;
  };
}
