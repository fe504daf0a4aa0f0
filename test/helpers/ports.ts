/**
 * Free loopback ports for processes a test starts later on fixed ports (etcd members, brokers
 * restarted on the ports they advertise, moto, Prometheus).
 */
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** The lowest port of the kernel's ephemeral range (Linux default 32768). */
function ephemeralLow(): number {
  try {
    const low = Number(
      readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").split(/\s+/)[0],
    );
    if (Number.isInteger(low) && low > 0) return low;
  } catch {}
  return 32768;
}

/**
 * Ports the Fetch standard's "bad port" list blocks: `fetch` (undici) refuses them with
 * `TypeError: fetch failed` (cause "bad port"), so a broker handed one is unreachable over HTTP
 * from a test (10080 did it to a CI run's cluster.test.ts on 2026-12-02).
 */
const fetchBadPorts = new Set([
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102,
  103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
  512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993,
  995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668,
  6669, 6679, 6697, 10080,
]);

/** Resolves true if `port` can be listened on at 127.0.0.1 now (the listener is closed again). */
function canListen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/**
 * Free loopback TCP ports, for processes the test starts later on fixed ports (etcd members,
 * brokers restarted on the ports they advertise). Each is checked by listening on it, then
 * released. They are drawn at random below the kernel's ephemeral range: any outgoing connection
 * on the machine takes its source port from that range, and did take a port handed out from it
 * before the etcd member meant for it bound it (`address already in use`). Each vitest worker
 * (`VITEST_POOL_ID`) draws from its own slice, so test files running side by side never get the
 * same port; the ports of one call are distinct, and none is one `fetch` refuses to reach.
 */
export async function freePorts(count: number): Promise<number[]> {
  const only = fixedRange();
  const low = only?.low ?? 10_000;
  const high = only === undefined ? ephemeralLow() : only.high + 1;
  const slices = only === undefined ? 8 : 1;
  const size = Math.floor((high - low) / slices);
  if (size < count * 4 && only === undefined)
    throw new Error(`too few ports below the ephemeral range (${high})`);
  const pool = Number(process.env.VITEST_POOL_ID ?? 1);
  const start = low + (((Number.isInteger(pool) ? pool : 1) - 1) % slices) * size;
  const ports: number[] = [];
  for (let tries = 0; ports.length < count; tries++) {
    if (tries > size) throw new Error(`no ${count} free ports in ${start}..${start + size - 1}`);
    const port = start + Math.floor(Math.random() * size);
    if (fetchBadPorts.has(port) || ports.includes(port)) continue;
    if (reserve(port) && (await canListen(port))) ports.push(port);
  }
  return ports;
}

/**
 * `ES_BROKER_TEST_PORTS=LOW-HIGH`: draw every port from LOW..HIGH only (for a run that shares the
 * machine and was given a port range; one test file at a time then).
 */
function fixedRange(): { low: number; high: number } | undefined {
  const m = /^(\d+)-(\d+)$/.exec(process.env.ES_BROKER_TEST_PORTS ?? "");
  if (m === null) return undefined;
  const low = Number(m[1]);
  const high = Number(m[2]);
  if (low < 1024 || high > 65535 || high < low)
    throw new Error(`ES_BROKER_TEST_PORTS=${process.env.ES_BROKER_TEST_PORTS}: not LOW-HIGH`);
  return { low, high };
}

/** Where a port handed out is recorded with the process that took it, for every test process. */
const reservations = join(tmpdir(), "es-broker-test-ports");

/**
 * Records `port` as handed out to this process, unless a live process (this one included: a port
 * it took earlier may belong to a broker that is down for a restart) took it already. A port is
 * never handed out twice while its taker lives, across workers and projects running side by side
 * (a restarted broker found its port taken once). A record of a dead process is taken over.
 */
function reserve(port: number): boolean {
  const file = join(reservations, String(port));
  try {
    mkdirSync(reservations, { recursive: true });
    writeFileSync(file, String(process.pid), { flag: "wx" });
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") return true;
  }
  const holder = Number(readFileSync(file, "utf8"));
  if (Number.isInteger(holder) && holder > 0) {
    try {
      process.kill(holder, 0);
      return false;
    } catch {}
  }
  writeFileSync(file, String(process.pid));
  return true;
}
