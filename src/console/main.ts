/**
 * The web console (`GET /console`; docs/console.md): a single page over the broker's own HTTP API.
 * Views by URL fragment:
 *
 * | fragment                 | shows                                                             |
 * |--------------------------|-------------------------------------------------------------------|
 * | `#/topics` (default)     | topics: partitions, size, high watermarks, produce rate; create a topic (retention, timestamp_type) |
 * | `#/topic/{name}`         | its partitions (log start, high watermark, size, segments, fenced, rate); change retention; produce a test record |
 * | `#/tail/{name}/{p}`      | a partition's live tail over SSE: offset, timestamp, key, value   |
 * | `#/groups`               | consumer groups: members, assignments, committed offsets, lag     |
 * | `#/storage`              | storage health: fenced partitions, corrupt segments, stray files, cold backlog, cleaner runs (admin) |
 *
 * Data refreshes every 2 s; rates are high-watermark deltas between refreshes. Everything shown
 * is text (`dom.ts`); the key lives in this tab's sessionStorage (`api.ts`).
 */
import {
  ApiError,
  call,
  coordinatorGroups,
  leaderTail,
  type RecordJson,
  storedKey,
  storeKey,
  tail,
} from "./api.ts";
import { type Child, externalLink, formatBytes, formatRate, h, replace, table } from "./dom.ts";

interface PartitionInfo {
  partition: number;
  log_start_offset: number;
  high_watermark: number;
  size_bytes: number;
  segments: number;
  fenced: boolean;
}
interface Topic {
  name: string;
  partitions: PartitionInfo[];
  config: Record<string, unknown>;
}
interface Group {
  group: string;
  generation: number;
  members: {
    member_id: string;
    topics: string[];
    assignments: { topic: string; partition: number }[];
  }[];
  offsets: {
    topic: string;
    partition: number;
    committed: number | null;
    high_watermark: number | null;
    lag: number | null;
    owner: string | null;
  }[];
}

const refreshMs = 2000;
const tailRowsMax = 500;

/** High watermarks seen, by "topic/partition", for rates. */
const seen = new Map<string, { hw: number; atMs: number; rate: number | null }>();

function rateOf(topic: string, p: PartitionInfo): number | null {
  const key = `${topic}/${p.partition}`;
  const now = performance.now();
  const last = seen.get(key);
  if (last === undefined) {
    seen.set(key, { hw: p.high_watermark, atMs: now, rate: null });
    return null;
  }
  if (now - last.atMs < 500) return last.rate;
  const rate = Math.max(0, ((p.high_watermark - last.hw) * 1000) / (now - last.atMs));
  seen.set(key, { hw: p.high_watermark, atMs: now, rate });
  return rate;
}

const app = document.getElementById("app")!;
const main = h("main", { attrs: { id: "view" } });
const status = h("span", { class: "status", attrs: { role: "status" } });
let stopView: () => void = () => {};

/** A link to a console view. */
function link(fragment: string, ...text: Child[]): HTMLAnchorElement {
  return h("a", { attrs: { href: fragment } }, ...text);
}

function errorText(err: unknown): string {
  if (err instanceof ApiError) return `${err.code}: ${err.message}`;
  return err instanceof Error ? err.message : String(err);
}

/** A line that shows an operation's outcome. */
function outcome(): { el: HTMLElement; ok: (text: string) => void; fail: (err: unknown) => void } {
  const el = h("p", { class: "outcome", attrs: { role: "status" } });
  return {
    el,
    ok: (text) => {
      el.className = "outcome ok";
      el.textContent = text;
    },
    fail: (err) => {
      el.className = "outcome error";
      el.textContent = errorText(err);
    },
  };
}

/** A labelled input or select. */
function field(label: string, input: HTMLInputElement | HTMLSelectElement): HTMLLabelElement {
  return h("label", {}, h("span", {}, label), input);
}

function input(name: string, attrs: Record<string, string> = {}): HTMLInputElement {
  return h("input", { attrs: { name, ...attrs } });
}

/** Runs `load` now and every refreshMs until stopped; `load` fills `into`. */
function refreshing(into: HTMLElement, load: () => Promise<Child>): () => void {
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const tick = async () => {
    try {
      const content = await load();
      if (!stopped) replace(into, content);
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return askForKey(err.message);
      if (!stopped) replace(into, h("p", { class: "outcome error" }, errorText(err)));
    }
    if (!stopped) timer = setTimeout(tick, refreshMs);
  };
  void tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function topicsView(): () => void {
  const list = h("div", { class: "data" });
  const created = outcome();
  const name = input("name", { required: "", pattern: "[A-Za-z0-9._\\-]+", maxlength: "249" });
  const partitions = input("partitions", { type: "number", min: "1", max: "4096", value: "1" });
  const retention = input("retention_ms", { type: "number", min: "-1", placeholder: "default" });
  // Whose clock retention measures (docs/decisions.md §16): log_append_time for producers that
  // send old or buffered data, so a record is kept for the retention after it arrived.
  const timestampType = h(
    "select",
    { attrs: { name: "timestamp_type" } },
    h("option", { attrs: { value: "" } }, "default (create_time)"),
    h("option", { attrs: { value: "create_time" } }, "create_time (the producer's)"),
    h("option", { attrs: { value: "log_append_time" } }, "log_append_time (the broker's)"),
  );
  const form = h(
    "form",
    {
      class: "card",
      attrs: { "aria-label": "Create a topic" },
      on: {
        submit: (event) => {
          event.preventDefault();
          const config: Record<string, number | string> = {};
          if (retention.value !== "") config.retention_ms = Number(retention.value);
          if (timestampType.value !== "") config.timestamp_type = timestampType.value;
          call<Topic>("POST", "/v1/topics", {
            name: name.value,
            partitions: Number(partitions.value),
            config,
          }).then((t) => {
            created.ok(`Created topic ${t.name} with ${t.partitions.length} partitions`);
            name.value = "";
          }, created.fail);
        },
      },
    },
    h("h2", {}, "Create a topic"),
    field("Name", name),
    field("Partitions", partitions),
    field("Retention (ms, -1 = forever)", retention),
    field("Timestamps", timestampType),
    h("button", { attrs: { type: "submit" } }, "Create"),
    created.el,
  );
  replace(main, h("h1", {}, "Topics"), list, form);
  return refreshing(list, async () => {
    const { topics } = await call<{ topics: Topic[] }>("GET", "/v1/topics");
    return table(
      ["Topic", "Partitions", "Size", "High watermarks", "Rate", "Fenced"],
      topics.map((t) => {
        const rate = t.partitions.reduce<number | null>((sum, p) => {
          const r = rateOf(t.name, p);
          return r === null || sum === null ? null : sum + r;
        }, 0);
        return [
          link(`#/topic/${encodeURIComponent(t.name)}`, t.name),
          t.partitions.length,
          formatBytes(t.partitions.reduce((s, p) => s + p.size_bytes, 0)),
          t.partitions.reduce((s, p) => s + p.high_watermark, 0),
          formatRate(rate),
          t.partitions.filter((p) => p.fenced).length || "",
        ];
      }),
    );
  });
}

function topicView(topicName: string): () => void {
  const path = `/v1/topics/${encodeURIComponent(topicName)}`;
  const partitionsEl = h("div", { class: "data" });
  const configEl = h("p", { class: "config" });
  const retentionOutcome = outcome();
  const retention = input("retention_ms", { type: "number", min: "-1", required: "" });
  const retentionForm = h(
    "form",
    {
      class: "card",
      attrs: { "aria-label": "Change retention" },
      on: {
        submit: (event) => {
          event.preventDefault();
          call<Topic>("PATCH", path, { config: { retention_ms: Number(retention.value) } }).then(
            (t) => retentionOutcome.ok(`retention_ms is now ${t.config.retention_ms}`),
            retentionOutcome.fail,
          );
        },
      },
    },
    h("h2", {}, "Change retention"),
    field("Retention (ms, -1 = forever)", retention),
    h("button", { attrs: { type: "submit" } }, "Apply"),
    retentionOutcome.el,
  );
  const produceOutcome = outcome();
  const key = input("key", { placeholder: "no key" });
  const value = input("value", { required: "" });
  const partition = input("partition", { type: "number", min: "0", placeholder: "broker picks" });
  const produceForm = h(
    "form",
    {
      class: "card",
      attrs: { "aria-label": "Produce a test record" },
      on: {
        submit: (event) => {
          event.preventDefault();
          const record: Record<string, unknown> = { value: value.value };
          if (key.value !== "") record.key = key.value;
          if (partition.value !== "") record.partition = Number(partition.value);
          call<{ offsets: { partition: number; offset: number }[] }>("POST", `${path}/records`, {
            records: [record],
          }).then((r) => {
            const o = r.offsets[0];
            produceOutcome.ok(`Appended at partition ${o.partition}, offset ${o.offset}`);
          }, produceOutcome.fail);
        },
      },
    },
    h("h2", {}, "Produce a test record"),
    field("Key", key),
    field("Value", value),
    field("Partition", partition),
    h("button", { attrs: { type: "submit" } }, "Produce"),
    produceOutcome.el,
  );
  replace(
    main,
    h("p", { class: "crumbs" }, link("#/topics", "Topics"), " / ", topicName),
    h("h1", {}, `Topic ${topicName}`),
    partitionsEl,
    configEl,
    h("div", { class: "forms" }, retentionForm, produceForm),
  );
  return refreshing(partitionsEl, async () => {
    const t = await call<Topic>("GET", path);
    replace(
      configEl,
      Object.entries(t.config)
        .map(([k, v]) => `${k}=${v}`)
        .join("  "),
    );
    return table(
      ["Partition", "Log start", "High watermark", "Size", "Segments", "Rate", "Fenced", ""],
      t.partitions.map((p) => [
        p.partition,
        p.log_start_offset,
        p.high_watermark,
        formatBytes(p.size_bytes),
        p.segments,
        formatRate(rateOf(t.name, p)),
        p.fenced ? h("strong", { class: "bad" }, "fenced") : "",
        link(`#/tail/${encodeURIComponent(t.name)}/${p.partition}`, "Live tail"),
      ]),
    );
  });
}

function tailView(topicName: string, partition: string): () => void {
  const rows = h("tbody", {});
  const state = h("p", { class: "outcome", attrs: { role: "status" } }, "Connecting…");
  const abort = new AbortController();
  replace(
    main,
    h(
      "p",
      { class: "crumbs" },
      link("#/topics", "Topics"),
      " / ",
      link(`#/topic/${encodeURIComponent(topicName)}`, topicName),
      ` / partition ${partition}`,
    ),
    h("h1", {}, `Live tail of ${topicName}/${partition}`),
    state,
    h(
      "table",
      { class: "tail" },
      h(
        "thead",
        {},
        h(
          "tr",
          {},
          ["Offset", "Timestamp", "Key", "Value"].map((x) =>
            h("th", { attrs: { scope: "col" } }, x),
          ),
        ),
      ),
      rows,
    ),
  );
  const onRecord = (r: RecordJson) => {
    state.textContent = `Following from offset ${r.offset}`;
    rows.prepend(
      h(
        "tr",
        {},
        h("td", {}, r.offset),
        h("td", {}, new Date(r.timestamp).toISOString()),
        h("td", { class: r.key === null ? "none" : "" }, r.key ?? "no key"),
        h("td", { class: "value" }, r.value),
      ),
    );
    while (rows.childElementCount > tailRowsMax) rows.lastElementChild?.remove();
  };
  const path = `/v1/topics/${encodeURIComponent(topicName)}/partitions/${encodeURIComponent(partition)}/stream?offset=latest`;
  const follow = async () => {
    state.textContent = "Following new records";
    try {
      await tail(path, onRecord, abort.signal);
      if (!abort.signal.aborted) state.textContent = "The stream ended";
    } catch (err) {
      if (abort.signal.aborted) return;
      if (err instanceof ApiError && err.status === 401) return askForKey(err.message);
      state.className = "outcome error";
      if (err instanceof ApiError && err.status === 307) return leaderElsewhere();
      state.textContent = errorText(err);
    }
  };
  // Cluster mode: another broker leads the partition, and this page may talk to its own
  // origin only; point at the leader's console (docs/console.md "In a cluster").
  const leaderElsewhere = async () => {
    const at = await leaderTail(topicName, Number(partition)).catch(() => null);
    if (abort.signal.aborted) return;
    replace(
      state,
      at === null
        ? "Another broker leads this partition (or none does now): open the live tail in its console."
        : [
            `Node ${at.node} leads ${topicName}/${partition}; this broker cannot show its live tail (the console talks to its own broker only). Open it in the leader's console (it asks for the API key again): `,
            externalLink(at.url, at.url),
          ],
    );
  };
  void follow();
  return () => abort.abort();
}

function groupsView(): () => void {
  const list = h("div", { class: "data" });
  replace(main, h("h1", {}, "Consumer groups"), list);
  return refreshing(list, async () => {
    let groups: Group[];
    try {
      ({ groups } = await call<{ groups: Group[] }>("GET", "/v1/groups"));
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 307)) throw err;
      // Cluster mode: groups are the controller's; this page may talk to its own broker only.
      const at = await coordinatorGroups().catch(() => null);
      return h(
        "p",
        { class: "outcome" },
        at === null
          ? "Another broker coordinates the consumer groups (or none does now): open its console."
          : [
              `Node ${at.node} coordinates the consumer groups; this broker does not show them (the console talks to its own broker only). Open them in its console (it asks for the API key again): `,
              externalLink(at.url, at.url),
            ],
      );
    }
    if (groups.length === 0) return h("p", { class: "empty" }, "No consumer groups.");
    return groups.map((g) =>
      h(
        "section",
        { class: "card group" },
        h("h2", {}, `Group ${g.group}`, h("small", {}, ` generation ${g.generation}`)),
        table(
          ["Member", "Topics", "Assignments"],
          g.members.map((m) => [
            m.member_id,
            m.topics.join(", "),
            m.assignments.map((a) => `${a.topic}/${a.partition}`).join(", "),
          ]),
          "Members",
        ),
        table(
          ["Topic", "Partition", "Committed", "High watermark", "Lag", "Owner"],
          g.offsets.map((o) => [
            o.topic,
            o.partition,
            o.committed ?? "—",
            o.high_watermark ?? "—",
            o.lag === null ? "—" : h("strong", { class: o.lag > 0 ? "lag" : "" }, o.lag),
            o.owner ?? "",
          ]),
          "Offsets and lag",
        ),
      ),
    );
  });
}

interface StoragePartition {
  partition: string;
  state: string;
  fenced_reason: string | null;
  segments: { base_offset: number; corruption: unknown }[];
  stray_files: { path?: string; name?: string }[];
  cleanup: {
    last_retention: { status: string; started_ms: number; reason: string } | null;
    last_compaction: { status: string; started_ms: number; reason: string } | null;
    cold_offload_failures: number;
    cold_backlog_segments?: number;
    stopped_reason: string | null;
    cold: { segments: number; size_bytes: number } | null;
  } | null;
}

function when(ms: number | undefined): string {
  return ms === undefined ? "—" : new Date(ms).toISOString().replace("T", " ").slice(0, 19);
}

function storageView(): () => void {
  const list = h("div", { class: "data" });
  replace(main, h("h1", {}, "Storage health"), list);
  return refreshing(list, async () => {
    const report = await call<{
      disk: {
        free_bytes: number | null;
        total_bytes: number | null;
        reserve: { state: string } | null;
      };
      cold_storage_dir: string | null;
      topics: { name: string; partitions: StoragePartition[] }[];
      unavailable: { name: string; reason: string }[];
    }>("GET", "/v1/admin/storage");
    const partitions = report.topics.flatMap((t) => t.partitions);
    const fenced = partitions.filter((p) => p.state === "fenced");
    const corrupt = partitions.flatMap((p) =>
      p.segments.filter((s) => s.corruption !== null).map((s) => [p.partition, s.base_offset]),
    );
    const backlog = partitions.reduce((n, p) => n + (p.cleanup?.cold_backlog_segments ?? 0), 0);
    const strays = partitions.reduce((n, p) => n + p.stray_files.length, 0);
    const { free_bytes: free, total_bytes: total, reserve } = report.disk;
    // Under 10 % free is what the shipped EsBrokerDiskSpaceLow alert fires on.
    const low = free !== null && total !== null && total > 0 && free / total < 0.1;
    const givenUp = reserve?.state === "given_up";
    return [
      h(
        "ul",
        { class: "health" },
        h(
          "li",
          { class: low || givenUp ? "bad" : "good" },
          free === null || total === null
            ? "Disk space: unknown"
            : `Disk space: ${formatBytes(free)} free of ${formatBytes(total)} (${total > 0 ? Math.floor((free * 100) / total) : 0} %)${givenUp ? "; full: the disk reserve is given up and appends are refused" : ""}`,
        ),
        h(
          "li",
          { class: fenced.length > 0 ? "bad" : "good" },
          `Fenced partitions: ${fenced.length}`,
        ),
        h(
          "li",
          { class: corrupt.length > 0 ? "bad" : "good" },
          `Corrupt segments: ${corrupt.length}`,
        ),
        h(
          "li",
          { class: report.unavailable.length > 0 ? "bad" : "good" },
          `Unavailable topics: ${report.unavailable.length}`,
        ),
        h("li", { class: strays > 0 ? "bad" : "good" }, `Stray files: ${strays}`),
        h(
          "li",
          { class: backlog > 0 ? "bad" : "good" },
          report.cold_storage_dir === null
            ? "Cold tier: off"
            : `Cold tier backlog: ${backlog} segments (${report.cold_storage_dir})`,
        ),
      ),
      table(
        ["Partition", "Fenced because"],
        fenced.map((p) => [p.partition, p.fenced_reason ?? ""]),
        "Fenced partitions",
      ),
      table(["Partition", "Segment base offset"], corrupt, "Corrupt segments"),
      table(
        ["Topic", "Why"],
        report.unavailable.map((u) => [u.name, u.reason]),
        "Unavailable topics",
      ),
      table(
        [
          "Partition",
          "Last retention",
          "Last compaction",
          "Cold segments",
          "Copy failures",
          "Stopped",
        ],
        partitions.map((p) => [
          p.partition,
          p.cleanup?.last_retention
            ? `${p.cleanup.last_retention.status} at ${when(p.cleanup.last_retention.started_ms)}`
            : "not yet",
          p.cleanup?.last_compaction
            ? `${p.cleanup.last_compaction.status} at ${when(p.cleanup.last_compaction.started_ms)}`
            : "not yet",
          p.cleanup?.cold === null || p.cleanup === null ? "—" : p.cleanup.cold.segments,
          p.cleanup?.cold_offload_failures ?? 0,
          p.cleanup?.stopped_reason ?? "",
        ]),
        "Cleaner runs",
      ),
    ];
  });
}

/** Asks for an API key (the broker has keys and none, or a refused one, is stored). */
function askForKey(reason?: string): void {
  stopView();
  stopView = () => {};
  const key = input("api-key", { type: "password", autocomplete: "off", required: "" });
  replace(
    main,
    h(
      "form",
      {
        class: "card login",
        attrs: { "aria-label": "API key" },
        on: {
          submit: (event) => {
            event.preventDefault();
            storeKey(key.value.trim());
            route();
          },
        },
      },
      h("h1", {}, "API key"),
      h(
        "p",
        {},
        "This broker needs an API key. It is kept for this tab only (sessionStorage) and sent in the Authorization header.",
      ),
      reason === undefined ? null : h("p", { class: "outcome error" }, reason),
      field("Key", key),
      h("button", { attrs: { type: "submit" } }, "Use this key"),
    ),
  );
  key.focus();
  renderStatus();
}

function renderStatus(): void {
  replace(
    status,
    storedKey() === null
      ? "no key"
      : h(
          "button",
          {
            class: "link",
            attrs: { type: "button" },
            on: {
              click: () => {
                storeKey(null);
                route();
              },
            },
          },
          "Forget key",
        ),
  );
}

function route(): void {
  stopView();
  const parts = location.hash
    .replace(/^#\/?/, "")
    .split("/")
    .map((p) => decodeURIComponent(p));
  for (const a of app.querySelectorAll("nav a"))
    a.classList.toggle("current", a.getAttribute("href") === `#/${parts[0] || "topics"}`);
  renderStatus();
  switch (parts[0]) {
    case "topic":
      stopView = topicView(parts[1] ?? "");
      break;
    case "tail":
      stopView = tailView(parts[1] ?? "", parts[2] ?? "0");
      break;
    case "groups":
      stopView = groupsView();
      break;
    case "storage":
      stopView = storageView();
      break;
    default:
      stopView = topicsView();
  }
}

replace(
  app,
  h(
    "header",
    {},
    h("strong", { class: "brand" }, "es-broker"),
    h(
      "nav",
      {},
      link("#/topics", "Topics"),
      link("#/groups", "Consumer groups"),
      link("#/storage", "Storage"),
    ),
    status,
  ),
  main,
);
window.addEventListener("hashchange", route);
// Ask for a key first when the broker needs one and this tab has none (no request made to fail).
call<{ api_keys?: boolean }>("GET", "/readyz").then(
  (ready) => (ready.api_keys === true && storedKey() === null ? askForKey() : route()),
  () => route(),
);
