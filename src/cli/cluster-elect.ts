/**
 * `es-broker cluster elect --unclean`: an unclean leader election of offline partitions
 * (docs/cluster.md "Unclean leader election"), asked of the controller through etcd: the command
 * puts `elect_unclean` and waits for the controller's answer in `elect_unclean_result`.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { electUncleanKey, electUncleanResultKey, topicKey } from "../cluster/keys.ts";
import { defaultClusterPrefix } from "../cluster/membership.ts";
import { errorMessage } from "../lib/errors.ts";
import { EtcdHttpClient, parseEtcdUrl } from "../runtime/etcd.ts";
import { loadTlsOutgoing } from "../runtime/tls.ts";
import { UsageError, intOption, isLoopback, parseCli } from "./args.ts";

/** Help text of `es-broker cluster elect`. */
export const clusterElectHelp = `Usage: es-broker cluster elect --unclean [--accept-data-loss] --topic NAME [--partition N] --cluster etcd://HOST:PORT[,...]

Unclean leader election (docs/cluster.md "Unclean leader election"): makes the live replica
with the largest (last leader epoch, log end) the leader of an offline partition that no rule
can elect now: no in-sync replica is alive, and the eligible replicas (ELR) are not all back
(their disk is lost, or a broker will never return). RECORDS THE MISSING REPLICAS ALONE HELD ARE
LOST: the controller logs cluster.unclean_leader_elected (error) with how many records below
committed_offset the new leader lacks; when a missing replica comes back, it truncates to the new
leader. Prefer bringing the missing brokers back. Refused (exit 1, with the reason) for a
partition that has a leader or that the rules can elect, and for a topic or partition that does
not exist ("no such topic", "no such partition"). Refused too, unless
--accept-data-loss, when a replica's records are on a data directory its node no longer runs on
(a forgotten directory: started on an empty one, the disk not mounted) or the chosen node runs on
a directory an earlier unclean election superseded: EVERY RECORD THAT DIRECTORY HELD (or every
record acknowledged since that election) IS LOST, and etcd cannot count them; start the node on
the directory the refusal names instead. The request goes to the controller through etcd (the
key elect_unclean); the command waits for its answer.

Options:
  --unclean                       required: says that records may be lost
  --accept-data-loss              also when a forgotten or superseded data directory's records are lost
  --topic NAME                    the topic
  --partition N                   only this partition (default: every offline partition of the topic)
  --cluster etcd://HOST:PORT[,…]  the cluster's etcd, as given to serve (etcds:// for TLS)
  --cluster-etcd-ca FILE          with etcds://: the CA (PEM) etcd's certificate is checked against
  --cluster-etcd-cert FILE        with etcds://: client certificate (PEM), with --cluster-etcd-key
  --cluster-etcd-key FILE
  --cluster-etcd-user NAME        etcd user (with --cluster-etcd-password-file)
  --cluster-etcd-password-file FILE
  --timeout-ms N                  how long to wait for the controller's answer (default 15000)
  -h, --help                      show this help
`;

/** The controller's answer to one request (the value of `elect_unclean_result`). */
export interface UncleanResult {
  /** The etcd revision of the `elect_unclean` put it answers. */
  request_revision: number;
  partitions: {
    partition: number;
    /** Set when elected. */
    leader?: number;
    leader_epoch?: number;
    /** Records below committed_offset the new leader lacks. */
    lost_below_committed?: number;
    /** ISR/ELR members not alive. */
    missing_replicas?: number[];
    /**
     * What a forgotten or superseded data directory held and is lost, in words (uncounted: the
     * controller's `cluster.unclean_leader_elected` says the same). Absent: none.
     */
    lost_directories?: string[];
    /** Set when refused. */
    refused?: string;
  }[];
}

/** `es-broker cluster elect`. Resolves with the exit code. */
export async function clusterElect(argv: string[]): Promise<number> {
  const { values, positionals } = parseCli({
    args: argv,
    options: {
      unclean: { type: "boolean", default: false },
      "accept-data-loss": { type: "boolean", default: false },
      topic: { type: "string" },
      partition: { type: "string" },
      cluster: { type: "string" },
      "cluster-etcd-ca": { type: "string" },
      "cluster-etcd-cert": { type: "string" },
      "cluster-etcd-key": { type: "string" },
      "cluster-etcd-user": { type: "string" },
      "cluster-etcd-password-file": { type: "string" },
      "timeout-ms": { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
    allowPositionals: true,
  });
  if (values.help) {
    process.stdout.write(clusterElectHelp);
    return 0;
  }
  if (positionals.length > 0)
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[0])}`);
  if (!values.unclean)
    throw new UsageError(
      'cluster elect needs --unclean (the only election it asks for; a preferred leader election is an etcdctl put: docs/cluster.md "Preferred leader election")',
    );
  const topic = values.topic;
  if (topic === undefined || topic === "") throw new UsageError("cluster elect needs --topic NAME");
  const partition =
    values.partition === undefined
      ? null
      : intOption("partition", values.partition, 0, 0, 2_147_483_647);
  if (values.cluster === undefined)
    throw new UsageError("cluster elect needs --cluster etcd://HOST:PORT[,HOST:PORT...]");
  let endpoints: string[];
  try {
    endpoints = parseEtcdUrl(values.cluster);
  } catch (err) {
    throw new UsageError(errorMessage(err));
  }
  const timeoutMs = intOption("timeout-ms", values["timeout-ms"], 15_000, 1, 3_600_000);
  const tlsEtcd = endpoints[0].startsWith("https:");
  const file = (o: "cluster-etcd-ca" | "cluster-etcd-cert" | "cluster-etcd-key") => {
    const v = values[o];
    if (v !== undefined && !tlsEtcd) throw new UsageError(`--${o} needs --cluster etcds://...`);
    return v === undefined ? undefined : resolve(v);
  };
  const files = {
    caPath: file("cluster-etcd-ca"),
    certPath: file("cluster-etcd-cert"),
    keyPath: file("cluster-etcd-key"),
  };
  if ((files.certPath === undefined) !== (files.keyPath === undefined))
    throw new UsageError("--cluster-etcd-cert and --cluster-etcd-key go together");
  const user = values["cluster-etcd-user"];
  const passwordFile = values["cluster-etcd-password-file"];
  if ((user === undefined) !== (passwordFile === undefined))
    throw new UsageError("--cluster-etcd-user and --cluster-etcd-password-file go together");
  if (user !== undefined && !tlsEtcd) {
    const remote = endpoints.find((e) => !isLoopback(new URL(e).hostname.replace(/^\[|\]$/g, "")));
    if (remote !== undefined)
      throw new UsageError(
        "--cluster-etcd-user with plain-HTTP etcd would send the password in clear: use --cluster etcds://...",
      );
  }
  const tls = tlsEtcd
    ? loadTlsOutgoing(files, {
        ca: "--cluster-etcd-ca",
        cert: "--cluster-etcd-cert",
        key: "--cluster-etcd-key",
      })
    : undefined;
  const etcd = new EtcdHttpClient(endpoints, {
    requestTimeoutMs: 5000,
    ...(tls === undefined ? {} : { tls: () => tls }),
    ...(user === undefined || passwordFile === undefined
      ? {}
      : {
          auth: {
            user,
            password: () => readFileSync(passwordFile, "utf8").replace(/\r?\n$/, ""),
          },
        }),
  });
  try {
    const prefix = defaultClusterPrefix;
    // A misspelt topic is no "nothing offline" (the controller finds no partition of it either):
    // say so, as a partition number out of range is "no such partition" (attack16 F8).
    if ((await etcd.get(topicKey(prefix, topic))) === null) {
      process.stderr.write(
        `es-broker cluster elect: no such topic ${JSON.stringify(topic)} in the cluster (etcd has no ${topicKey(prefix, topic)})\n`,
      );
      return 1;
    }
    const put = await etcd.txn({
      compare: [],
      success: [
        {
          put: {
            key: electUncleanKey(prefix),
            value: JSON.stringify({
              topic,
              partition,
              ...(values["accept-data-loss"] ? { accept_data_loss: true } : {}),
            }),
          },
        },
      ],
    });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const kv = await etcd.get(electUncleanResultKey(prefix));
      let result: UncleanResult | null = null;
      try {
        result = kv === null ? null : (JSON.parse(kv.value) as UncleanResult);
      } catch {}
      if (result !== null && result.request_revision === put.revision) {
        let failed = result.partitions.length === 0;
        if (result.partitions.length === 0)
          process.stderr.write(
            `es-broker cluster elect: topic ${JSON.stringify(topic)} has no ${partition === null ? "offline partition" : `partition ${partition}`}\n`,
          );
        for (const p of result.partitions) {
          const name = `${topic}/${p.partition}`;
          if (p.refused !== undefined) {
            failed = true;
            process.stderr.write(`es-broker cluster elect: ${name} not elected: ${p.refused}\n`);
          } else
            process.stdout.write(
              `${name}: node ${p.leader} leads at epoch ${p.leader_epoch} (unclean: ${p.lost_below_committed ?? 0} records below committed_offset lost${(p.missing_replicas ?? []).length === 0 ? "" : `, and any acknowledged record only node ${(p.missing_replicas ?? []).join(", ")} held`}${(p.lost_directories ?? []).map((d) => `, and ${d}`).join("")})\n`,
            );
        }
        return failed ? 1 : 0;
      }
      if (Date.now() > deadline) {
        process.stderr.write(
          `es-broker cluster elect: no answer from the controller within ${timeoutMs} ms (is a broker running? its log says cluster.unclean_leader_elected or cluster.unclean_election_refused)\n`,
        );
        return 1;
      }
      await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    await etcd.close();
  }
}
