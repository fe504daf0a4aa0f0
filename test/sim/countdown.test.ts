/**
 * The countdown sweep (see countdown.ts): every mutation of a small fixed workload fails once,
 * in three flavours, each followed by a clean restart or a crash, then recovery and the full
 * checks. A failure names N, the flavour and what followed; `npm run sim -- --countdown`
 * replays the sweep with its trace.
 */
import { describe, expect, it } from "vitest";
import { countdownVariants, runCountdown } from "./countdown.ts";

describe("countdown sweep over every mutation of a small workload", () => {
  for (const variant of countdownVariants) {
    it(`survives the Nth mutation failing with ${variant.name}, for every N, then a restart or a crash`, async () => {
      const result = await runCountdown({ variant });
      // The workload is big enough to cover topic creation, group commits and rolls.
      expect(result.mutations).toBeGreaterThan(60);
      expect(result.runs).toBe(result.mutations * 4);
    }, 300_000);
  }
});
