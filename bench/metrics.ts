/**
 * What `GET /metrics` costs a producing broker (docs/benchmarks.md "Metrics"): the 64 producers ×
 * 1 record TCP case (64 connections, each a closed loop of one-record produce requests, one
 * partition, default `--flush-every-records 1`), measured without scrapes and with a scrape of the
 * `--metrics-port` listener every `scrapeMs` (1 s), the two cases interleaved `rounds` times in
 * one run of one broker process so that drift between runs cancels out. The broker also holds
 * `idleTopics` idle one-partition topics and a consumer group per topic, so each scrape has
 * realistic work to do (every partition and lag series). It prints records/s, the broker's CPU
 * time per record (/proc), the scrapes made and their mean duration and size, and the scraped
 * case as a share of the other. The machine is shared: read the ratios, not the digits.
 */
import { spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { TcpClient } from "../src/client/client.ts";
import { EntryBatchBuilder } from "../src/storage/record.ts";

interface Options {
  producers: number;
  seconds: number;
  rounds: number;
  scrapeMs: number;
  idleTopics: number;
  json?: string;
}

function parse(argv: string[]): Options {
  const o: Options = { producers: 64, seconds: 10, rounds: 3, scrapeMs: 1000, idleTopics: 100 };
  for (let i = 0; i < argv.length; i += 2) {
    const [name, value] = [argv[i].replace(/^--/, ""), argv[i + 1]];
    if (name === "json") o.json = value;
    else if (name in o) (o as unknown as Record<string, number>)[name] = Number(value);
    else throw new Error(`unknown option ${argv[i]}`);
  }
  return o;
}

/** utime + stime of a process, in µs (Linux /proc; clock ticks of 10 ms). */
function cpuMicros(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

interface Sample {
  records: number;
  ms: number;
  cpuUs: number;
  scrapes: number;
  scrapeMs: number;
  scrapeBytes: number;
}

/** Runs the benchmark; resolves with the exit code. */
export async function main(argv: string[], env: { dir: string; broker: string }): Promise<number> {
  const o = parse(argv);
  const proc = spawn(
    process.execPath,
    [
      "--max-semi-space-size=4",
      env.broker,
      "serve",
      "--data-dir",
      env.dir,
      "--http-port",
      "0",
      "--tcp-port",
      "0",
      "--metrics-port",
      "0",
      "--log-level",
      "warn",
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const line = await new Promise<string>((resolve) =>
    proc.stdout!.once("data", (d) => resolve(String(d))),
  );
  const [host, port] = /tcp=(\S+):(\d+)/.exec(line)!.slice(1);
  const metricsUrl = / metrics=(\S+)/.exec(line)![1];
  try {
    const clients = await Promise.all(
      Array.from({ length: o.producers }, () => TcpClient.connect({ host, port: Number(port) })),
    );
    await clients[0].createTopic({ name: "load", partitions: 1 });
    for (let t = 0; t < o.idleTopics; t++) {
      await clients[0].createTopic({ name: `idle-${t}`, partitions: 1 });
      await clients[0].commitOffsets({
        group: `group-${t}`,
        offsets: [{ topic: `idle-${t}`, partition: 0, offset: 0 }],
      });
    }
    const batch = new EntryBatchBuilder().add(null, new Uint8Array(100)).build();

    /** Producers run until `until` (performance.now() ms); resolves with records acknowledged. */
    const load = async (until: number): Promise<number> => {
      let acked = 0;
      await Promise.all(
        clients.map(async (client) => {
          while (performance.now() < until) {
            await client.produce("load", batch, { partition: 0 });
            acked++;
          }
        }),
      );
      return acked;
    };
    const measure = async (scrape: boolean): Promise<Sample> => {
      const cpu0 = cpuMicros(proc.pid!);
      const t0 = performance.now();
      const until = t0 + o.seconds * 1000;
      const sample: Sample = {
        records: 0,
        ms: 0,
        cpuUs: 0,
        scrapes: 0,
        scrapeMs: 0,
        scrapeBytes: 0,
      };
      const scraper = (async () => {
        if (!scrape) return;
        for (let next = t0 + o.scrapeMs; next < until; next += o.scrapeMs) {
          await new Promise((r) => setTimeout(r, Math.max(0, next - performance.now())));
          const s0 = performance.now();
          const text = await (await fetch(metricsUrl)).text();
          sample.scrapeMs += performance.now() - s0;
          sample.scrapeBytes = text.length;
          sample.scrapes++;
        }
      })();
      sample.records = await load(until);
      await scraper;
      sample.ms = performance.now() - t0;
      sample.cpuUs = cpuMicros(proc.pid!) - cpu0;
      return sample;
    };

    // The CPU one scrape costs the broker, measured with no load: 40 scrapes back to back, less
    // the CPU of as long an idle stretch. Steadier on a shared machine than the throughput ratio.
    const scrapeCpuUs = async (): Promise<number> => {
      for (let i = 0; i < 5; i++) await (await fetch(metricsUrl)).text();
      const idle0 = cpuMicros(proc.pid!);
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, 1000));
      const idleUsPerMs = (cpuMicros(proc.pid!) - idle0) / (performance.now() - t0);
      const cpu0 = cpuMicros(proc.pid!);
      const t1 = performance.now();
      const n = 40;
      for (let i = 0; i < n; i++) await (await fetch(metricsUrl)).text();
      const busy = cpuMicros(proc.pid!) - cpu0 - idleUsPerMs * (performance.now() - t1);
      return Math.max(0, busy / n);
    };
    const scrapeCpu = await scrapeCpuUs();

    await load(performance.now() + 2000); // warm-up
    const cases = ["none", "scrape"] as const;
    const totals = {
      none: { records: 0, ms: 0, cpuUs: 0, scrapes: 0, scrapeMs: 0, scrapeBytes: 0 },
      scrape: { records: 0, ms: 0, cpuUs: 0, scrapes: 0, scrapeMs: 0, scrapeBytes: 0 },
    };
    const perRound: { none: number; scrape: number }[] = [];
    for (let round = 0; round < o.rounds; round++) {
      const shares = { none: 0, scrape: 0 };
      // Alternate which case goes first, so a trend within a round favours neither.
      const order = round % 2 === 0 ? cases : ([...cases].reverse() as (typeof cases)[number][]);
      for (const c of order) {
        const s = await measure(c === "scrape");
        shares[c] = Math.round((s.records / s.ms) * 1000);
        const t = totals[c];
        t.records += s.records;
        t.ms += s.ms;
        t.cpuUs += s.cpuUs;
        t.scrapes += s.scrapes;
        t.scrapeMs += s.scrapeMs;
        t.scrapeBytes = Math.max(t.scrapeBytes, s.scrapeBytes);
      }
      perRound.push(shares);
    }
    const result: Record<string, number> = {};
    for (const c of cases) {
      const t = totals[c];
      result[`${c}_records_per_s`] = Math.round((t.records / t.ms) * 1000);
      result[`${c}_cpu_us_per_record`] = Math.round((t.cpuUs / t.records) * 100) / 100;
    }
    result.scrapes = totals.scrape.scrapes;
    result.scrape_ms_mean =
      totals.scrape.scrapes === 0
        ? 0
        : Math.round((totals.scrape.scrapeMs / totals.scrape.scrapes) * 100) / 100;
    result.scrape_bytes = totals.scrape.scrapeBytes;
    result.scrape_cpu_us = Math.round(scrapeCpu);
    // One scrape per scrapeMs, against the CPU the 64 × 1 case spends per second without scrapes.
    result.scrape_cpu_share_of_load =
      Math.round(
        ((scrapeCpu * (1000 / o.scrapeMs)) /
          (result.none_records_per_s * result.none_cpu_us_per_record)) *
          10000,
      ) / 10000;
    result.throughput_share =
      Math.round((result.scrape_records_per_s / result.none_records_per_s) * 1000) / 1000;
    result.cpu_per_record_share =
      Math.round((result.scrape_cpu_us_per_record / result.none_cpu_us_per_record) * 1000) / 1000;
    console.log(
      `${o.producers} producers × 1 record over TCP, ${o.rounds} rounds of ${o.seconds} s per case, interleaved; ${o.idleTopics} idle topics and groups`,
    );
    console.log(
      `none    ${String(result.none_records_per_s).padStart(8)} records/s  ${String(result.none_cpu_us_per_record).padStart(7)} µs CPU/record`,
    );
    console.log(
      `scrape  ${String(result.scrape_records_per_s).padStart(8)} records/s  ${String(result.scrape_cpu_us_per_record).padStart(7)} µs CPU/record  (${result.throughput_share}× throughput, ${result.cpu_per_record_share}× CPU/record of none; ${result.scrapes} scrapes every ${o.scrapeMs} ms, ${result.scrape_ms_mean} ms and ${result.scrape_bytes} bytes each)`,
    );
    console.log(
      `one scrape costs the broker ${result.scrape_cpu_us} µs of CPU (no load): ${(result.scrape_cpu_share_of_load * 100).toFixed(2)} % of the CPU the case uses per second at one scrape every ${o.scrapeMs} ms`,
    );
    console.log(
      `per round (records/s, none / scrape): ${perRound.map((r) => `${r.none} / ${r.scrape}`).join(", ")}`,
    );
    if (o.json !== undefined)
      writeFileSync(o.json, `${JSON.stringify({ ...result, rounds: perRound }, null, 2)}\n`);
    for (const c of clients) await c.close();
    return 0;
  } finally {
    proc.kill("SIGTERM");
    await new Promise((r) => proc.once("exit", r));
  }
}
