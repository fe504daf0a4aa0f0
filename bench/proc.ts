/**
 * What the benchmark reads about a server process from `/proc` (Linux): its resident memory and
 * the CPU time it used. Shared by the load generator (`generator.ts`) and the harness, which
 * measures the kcat runs of the Kafka cases itself.
 */
import * as fs from "node:fs";

/**
 * Resident memory of a process, from `/proc/<pid>/status`, and the CPU time it used (user +
 * system, from `/proc/<pid>/stat`, in clock ticks of 10 ms).
 */
export class RssWatch {
  readonly #pid: number | undefined;
  #resetWorked = false;
  #cpuTicksAtStart: [number, number] | null = null;
  #sampledPeak = 0;
  readonly samples: [number, number][] = [];

  constructor(pid: number | undefined) {
    this.#pid = pid;
  }

  #field(name: "VmRSS" | "VmHWM"): number | null {
    if (this.#pid === undefined) return null;
    try {
      const m = new RegExp(`^${name}:\\s+(\\d+) kB`, "m").exec(
        fs.readFileSync(`/proc/${this.#pid}/status`, "utf8"),
      );
      return m ? Number(m[1]) * 1024 : null;
    } catch {
      return null;
    }
  }

  /** [utime, stime] of the process, in clock ticks (USER_HZ, 100 per second on Linux), or null. */
  #cpuTicks(): [number, number] | null {
    if (this.#pid === undefined) return null;
    try {
      const stat = fs.readFileSync(`/proc/${this.#pid}/stat`, "utf8");
      // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      return [Number(fields[11]), Number(fields[12])];
    } catch {
      return null;
    }
  }

  /** CPU time the process used since {@link start}, in ms (10 ms resolution), or null when unknown. */
  cpuMs(): number | null {
    const user = this.userCpuMs();
    const now = this.#cpuTicks();
    return user === null || now === null || this.#cpuTicksAtStart === null
      ? null
      : user + (now[1] - this.#cpuTicksAtStart[1]) * 10;
  }

  /** The user part of {@link cpuMs} (the process's own code; the rest is the kernel's), or null. */
  userCpuMs(): number | null {
    const now = this.#cpuTicks();
    return now === null || this.#cpuTicksAtStart === null
      ? null
      : (now[0] - this.#cpuTicksAtStart[0]) * 10;
  }

  /** Resets the kernel's peak-RSS mark (VmHWM) so the peak covers the window only. */
  start(): void {
    if (this.#pid === undefined) return;
    this.#cpuTicksAtStart = this.#cpuTicks();
    try {
      fs.writeFileSync(`/proc/${this.#pid}/clear_refs`, "5");
      this.#resetWorked = true;
    } catch {
      this.#resetWorked = false;
    }
    this.sample();
  }

  /** Notes the current RSS (the fallback peak when VmHWM cannot be reset). */
  sample(): number | null {
    const rss = this.#field("VmRSS");
    if (rss !== null) this.#sampledPeak = Math.max(this.#sampledPeak, rss);
    return rss;
  }

  /** Open file descriptors of the process (entries of `/proc/<pid>/fd`), or null when unknown. */
  fds(): number | null {
    if (this.#pid === undefined) return null;
    try {
      return fs.readdirSync(`/proc/${this.#pid}/fd`).length;
    } catch {
      return null;
    }
  }

  peak(): number | null {
    if (this.#pid === undefined) return null;
    this.sample();
    const hwm = this.#resetWorked ? this.#field("VmHWM") : null;
    return hwm ?? (this.#sampledPeak > 0 ? this.#sampledPeak : null);
  }
}
