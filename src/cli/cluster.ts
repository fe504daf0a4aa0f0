/**
 * `es-broker cluster status`: what a cluster looks like now (docs/cluster.md "Clients"): its
 * brokers, the controller, and per partition the leader, leader epoch, replicas, ISR, ELR and
 * the high watermark (from the leader), as a table or, with `--json`, as one JSON document.
 */
import type { ConnectionOptions } from "node:tls";
import { clientTlsOptions, connectionHelp, connectionOptions, readApiKey } from "./connection.ts";
import type {
  ClusterForgottenReplica,
  ClusterMetadata,
  ClusterPartitionInfo,
  ClusterPeerLink,
} from "../broker/types.ts";
import { requestJson } from "./keys.ts";
import { UsageError, intOption, parseCli } from "./args.ts";
import { brokerDefault, connectRouted } from "./client-commands.ts";
import { clientTimeoutMsDefault } from "../client/client.ts";
import { clusterElect } from "./cluster-elect.ts";
import { offlineReason } from "../cluster/partition-state.ts";

/** Help text of `es-broker cluster`. */
export const clusterHelp = `Usage: es-broker cluster status [options]
       es-broker cluster elect --unclean --topic NAME [--partition N] --cluster etcd://...
                               (an unclean leader election: see es-broker cluster elect --help)

Shows a cluster (serve --cluster): its live brokers (those holding an etcd lease: a killed
broker stays listed until its lease expires, about 6 s) with their TCP, HTTP and Kafka
listener addresses (kafka: what Kafka clients bootstrap from, when it has one), the
controller, and for every partition its leader ("none" now; -1 in --json), leader epoch,
replicas, in-sync replicas (ISR), eligible leader replicas (ELR), high watermark (asked of
the leader; "?", null in --json, when the leader did not answer), each follower's lag in
records behind the leader's log end as the leader sees it (node:lag; ? = not fetched yet;
node:not-live = that broker is not live, its lag stale, "live": false in --json; asked of
each leader's HTTP port), and status (the first that holds): offline (no leader; with what
it waits for and
what would bring it back, "reason" in --json; a replica whose records are on a data directory
its node no longer runs on is named first, "forgotten" in --json), leader-not-live (the leader
named is not a live broker: killed, until the controller moves its partitions), leader-
unreachable (the leader did not answer for its high watermark), below-min-isr (fewer in-sync
replicas than the topic's min_insync_replicas: every write is refused, not_enough_replicas;
under_min_isr in --json), under-replicated (fewer in-sync replicas than replicas;
under_replicated in --json) or ok; "status" in --json. Then every link between brokers that
fails (replica fetch: node A cannot fetch from node B, and why; "TLS:" marks a certificate
not trusted or not naming its host, a refused client certificate, a plain-TCP peer; "links"
in --json, every link). HTTPS ports are asked with the TLS options below. Exit 1 against a
single node, or when no broker answers.

Options:
  --broker HOST:PORT[,…]   any broker(s) of the cluster, TCP address (default ${brokerDefault})
  --topic NAME             only this topic (repeatable)
  --json                   one JSON document instead of the table
${connectionHelp}
  --timeout-ms N           how long one request waits for an answer before the command fails
                           (default 30000; each broker's HTTP view of its followers
                           and links: 5000, or N when given)
  -h, --help               show this help
`;

/** One partition as `cluster status` reports it. */
interface PartitionStatus {
  partition: number;
  leader: number;
  leader_epoch: number;
  replicas: number[];
  isr: number[];
  elr: number[];
  under_replicated: boolean;
  /** The topic's min_insync_replicas (null when no broker's HTTP port answered). */
  min_insync_replicas: number | null;
  /** Fewer in-sync replicas than min_insync_replicas: the leader refuses every write. */
  under_min_isr: boolean;
  /** The first that holds of: offline, leader-not-live, leader-unreachable, below-min-isr, under-replicated, ok. */
  status: string;
  /** Offline: what it waits for, and what would bring it back (null otherwise). */
  reason: string | null;
  /**
   * The partition state's forgotten or superseded data directories ([] for none; null when no
   * broker's HTTP port answered): an offline partition whose records are on a directory its
   * node no longer runs on waits for that directory (docs/cluster.md "Unclean leader election").
   */
  forgotten: ClusterForgottenReplica[] | null;
  /** The leader's high watermark, null when the leader could not be asked. */
  high_watermark: number | null;
  /**
   * As the leader reports them (null when its HTTP port could not be asked), each with `live`:
   * false when the follower holds no etcd lease now (killed or stopped), its lag then stale.
   */
  followers: (NonNullable<ClusterPartitionInfo["followers"]>[number] & { live: boolean })[] | null;
}

/** A replica-fetch link as `cluster status` reports it: `from` fetches (or tries to) from `node_id`. */
type LinkStatus = { from: number } & ClusterPeerLink;

/**
 * Every broker's own view (`GET /v1/cluster` on each broker's HTTP URL, over HTTPS with `tls`):
 * as leader, its followers' positions and lag; and its replica-fetch links to the others. A
 * broker that does not answer is left out. `forgotten` and `dataDirs` (each partition's
 * forgotten directories, each broker's data directory id) are from the view of `m.node_id`, the
 * broker whose metadata the table shows, or of another broker when it did not answer.
 */
async function brokerViews(
  m: ClusterMetadata,
  apiKey: string | undefined,
  tls: ConnectionOptions | undefined,
  timeoutMs: number,
): Promise<{
  views: Map<string, ClusterPartitionInfo>;
  minInsync: Map<string, number>;
  links: LinkStatus[];
  kafka: Map<number, string>;
  forgotten: Map<string, ClusterForgottenReplica[]> | null;
  dataDirs: Map<number, string>;
}> {
  const views = new Map<string, ClusterPartitionInfo>();
  /** Each answering broker's whole answer, by its node id. */
  const answers = new Map<number, ClusterMetadata>();
  const minInsync = new Map<string, number>();
  const links: LinkStatus[] = [];
  // Kafka listeners are in the HTTP view's brokers only (the TCP metadata leaves them out).
  const kafka = new Map<number, string>();
  await Promise.all(
    m.brokers.map(async (b) => {
      try {
        const theirs = (await requestJson(new URL(b.http), {
          method: "GET",
          path: "/v1/cluster",
          key: apiKey,
          tls: tls ?? {},
          timeoutMs,
        })) as ClusterMetadata;
        answers.set(b.node_id, theirs);
        for (const t of theirs.topics)
          for (const p of t.partitions) {
            if (p.leader === b.node_id && p.followers !== undefined)
              views.set(`${t.name}/${p.partition}`, p);
            if (p.min_insync_replicas !== undefined)
              minInsync.set(`${t.name}/${p.partition}`, p.min_insync_replicas);
          }
        for (const l of theirs.peer_links ?? []) links.push({ from: b.node_id, ...l });
        for (const other of theirs.brokers)
          if (other.kafka !== undefined) kafka.set(other.node_id, other.kafka);
      } catch {}
    }),
  );
  links.sort((a, b) => a.from - b.from || a.node_id - b.node_id);
  const chosen = answers.get(m.node_id) ?? answers.values().next().value;
  const forgotten =
    chosen === undefined
      ? null
      : new Map(
          chosen.topics.flatMap((t) =>
            t.partitions.map((p) => [`${t.name}/${p.partition}`, p.forgotten ?? []] as const),
          ),
        );
  const dataDirs = new Map<number, string>();
  for (const b of chosen?.brokers ?? [])
    if (b.data_dir_id !== undefined) dataDirs.set(b.node_id, b.data_dir_id);
  return { views, minInsync, links, kafka, forgotten, dataDirs };
}

/** `es-broker cluster status`. */
export async function cluster(argv: string[]): Promise<number> {
  if (argv[0] === "elect") return clusterElect(argv.slice(1));
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      broker: { type: "string" },
      ...connectionOptions,
      topic: { type: "string", multiple: true },
      json: { type: "boolean", default: false },
      "timeout-ms": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  const [action, ...rest] = positionals;
  // Checked before --help, so that `cluster elect-preferred --help` does not look like a command.
  if (action !== undefined && action !== "status")
    throw new UsageError(
      `unknown cluster action ${JSON.stringify(action)}: the actions are status and elect --unclean (elect first, before any option; preferred leader election is an etcdctl put: docs/cluster.md "Preferred leader election")`,
    );
  if (values.help || positionals.length === 0) {
    process.stdout.write(clusterHelp);
    return values.help ? 0 : 2;
  }
  if (rest.length > 0) throw new UsageError(`unexpected argument ${JSON.stringify(rest[0])}`);
  const { cluster: router } = await connectRouted(values);
  try {
    const wanted = values.topic ?? [];
    await router.refresh();
    const m = router.metadata;
    if (m === null)
      throw new Error(
        `Cannot show the cluster: the broker at ${values.broker ?? brokerDefault} runs as a single node (serve --cluster joins a cluster)`,
      );
    const topics = wanted.length === 0 ? m.topics : m.topics.filter((t) => wanted.includes(t.name));
    for (const name of wanted)
      if (!m.topics.some((t) => t.name === name))
        throw new Error(`Cannot show topic ${JSON.stringify(name)}: it does not exist`);
    // A broker's view is optional in the table ("?"): a short wait unless --timeout-ms says.
    const viewTimeoutMs =
      values["timeout-ms"] === undefined
        ? 5000
        : intOption("timeout-ms", values["timeout-ms"], clientTimeoutMsDefault, 1, 3_600_000);
    const { views, minInsync, links, kafka, forgotten, dataDirs } = await brokerViews(
      m,
      readApiKey(values),
      clientTlsOptions(values),
      viewTimeoutMs,
    );
    const live = new Set(m.brokers.map((b) => b.node_id));
    const status = await Promise.all(
      topics.map(async (t) => ({
        name: t.name,
        partitions: await Promise.all(
          t.partitions.map(async (p): Promise<PartitionStatus> => {
            let highWatermark: number | null = null;
            if (p.leader !== -1) {
              try {
                const leader = await router.leader(t.name, p.partition);
                highWatermark = (
                  await leader.listOffsets({ topic: t.name, partition: p.partition })
                ).highWatermark;
              } catch {}
            }
            const minIsr = minInsync.get(`${t.name}/${p.partition}`) ?? null;
            const lost =
              forgotten === null ? null : (forgotten.get(`${t.name}/${p.partition}`) ?? []);
            const underReplicated = p.isr.length < p.replicas.length;
            const underMinIsr = minIsr !== null && p.isr.length < minIsr;
            // A killed leader stays in etcd's state until its lease expires and the controller
            // moves it: its partitions must not read "ok" meanwhile (newuser15 #6).
            const state =
              p.leader === -1
                ? "offline"
                : !live.has(p.leader)
                  ? "leader-not-live"
                  : highWatermark === null
                    ? "leader-unreachable"
                    : underMinIsr
                      ? "below-min-isr"
                      : underReplicated
                        ? "under-replicated"
                        : "ok";
            return {
              partition: p.partition,
              leader: p.leader,
              leader_epoch: p.leader_epoch,
              replicas: p.replicas,
              isr: p.isr,
              elr: p.elr,
              under_replicated: underReplicated,
              min_insync_replicas: minIsr,
              under_min_isr: underMinIsr,
              status: state,
              // With the forgotten directories and the brokers' own, it names a forgotten one
              // first, as the controller's cluster.partition_offline does.
              reason: offlineReason(
                { ...p, ...(lost === null ? {} : { forgotten: lost }) },
                (id) => live.has(id),
                { topic: t.name, partition: p.partition },
                (id) => dataDirs.get(id),
              ),
              forgotten: lost,
              high_watermark: highWatermark,
              followers:
                views
                  .get(`${t.name}/${p.partition}`)
                  ?.followers?.map((f) => ({ ...f, live: live.has(f.node_id) })) ?? null,
            };
          }),
        ),
      })),
    );
    const doc = {
      cluster_id: m.cluster_id,
      controller: m.controller,
      brokers: m.brokers.map((b) => {
        const listener = b.kafka ?? kafka.get(b.node_id);
        return listener === undefined ? b : { ...b, kafka: listener };
      }),
      topics: status,
      links,
    };
    if (values.json) {
      process.stdout.write(`${JSON.stringify(doc, null, 2)}\n`);
      return 0;
    }
    const lines: string[] = [];
    lines.push(
      `cluster ${m.cluster_id}, controller: ${m.controller === -1 ? "none" : `node ${m.controller}`}`,
    );
    lines.push(`brokers (${m.brokers.length} live):`);
    for (const b of doc.brokers)
      lines.push(
        `  node ${b.node_id}\ttcp ${b.tcp}\thttp ${b.http}${b.kafka === undefined ? "" : `\tkafka ${b.kafka}`}`,
      );
    const rows: string[][] = [
      [
        "topic",
        "partition",
        "leader",
        "epoch",
        "replicas",
        "isr",
        "elr",
        "high_watermark",
        "lag",
        "status",
      ],
    ];
    const ids = (list: number[]) => (list.length === 0 ? "-" : list.join(","));
    for (const t of status)
      for (const p of t.partitions)
        rows.push([
          t.name,
          String(p.partition),
          p.leader === -1 ? "none" : String(p.leader),
          String(p.leader_epoch),
          ids(p.replicas),
          ids(p.isr),
          ids(p.elr),
          p.high_watermark === null ? "?" : String(p.high_watermark),
          !p.followers || p.followers.length === 0
            ? "-"
            : p.followers
                .map((f) => `${f.node_id}:${!f.live ? "not-live" : f.lag < 0 ? "?" : f.lag}`)
                .join(","),
          p.status === "below-min-isr"
            ? "below-min-isr (writes refused)"
            : p.reason === null
              ? p.status
              : `${p.status} (${p.reason})`,
        ]);
    const widths = rows[0].map((_, c) => Math.max(...rows.map((r) => r[c].length)));
    for (const r of rows)
      lines.push(
        r
          .map((cell, c) => cell.padEnd(widths[c]))
          .join("  ")
          .trimEnd(),
      );
    const failing = links.filter((l) => !l.ok);
    if (failing.length > 0) {
      lines.push("failing links between brokers (replica fetch):");
      for (const l of failing)
        lines.push(
          `  node ${l.from} -> node ${l.node_id} (${l.tcp}${l.tls ? ", TLS" : ""}): ${l.tls_failure ? "TLS: " : ""}${l.error ?? "?"}`,
        );
    }
    process.stdout.write(`${lines.join("\n")}\n`);
    return 0;
  } finally {
    await router.close();
  }
}
