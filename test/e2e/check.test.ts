/** `es-broker check` on a stopped data directory: exit codes and output, on every runtime target. */
import { describe, expect, it } from "vitest";
import {
  appendFileSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { TcpClient } from "../../src/client/client.ts";
import { encodeJournalEntry, journalHeaderBytes } from "../../src/storage/producer-journal.ts";
import { tempDir } from "../helpers/tmp.ts";
import { runCli, startBroker, target } from "./harness.ts";

describe(`[${target}] es-broker check`, () => {
  it("exits 0 on a clean directory, 0 with a warning for a torn tail, and 1 for a corrupt sealed segment", async () => {
    const { dir } = tempDir();
    const broker = await startBroker(`${dir}/data`);
    const client = await TcpClient.connect(broker.tcp);
    await client.createTopic({ name: "c", partitions: 1, config: { segment_bytes: 2048 } });
    for (let i = 0; i < 20; i++)
      await client.produce("c", [{ key: `k${i}`, value: "v".repeat(300) }]);
    await client.close();
    expect(await broker.stop("SIGTERM")).toBe(0);

    const clean = await runCli(["check", "--data-dir", `${dir}/data`]);
    expect(clean.code, clean.stderr).toBe(0);
    expect(clean.stdout.toString()).toMatch(/segments checked: 0 corrupt, 0 warnings/);

    const pdir = `${dir}/data/topics/c/0`;
    const logs = readdirSync(pdir)
      .filter((n) => n.endsWith(".log"))
      .sort();
    expect(logs.length).toBeGreaterThan(2);
    appendFileSync(`${pdir}/${logs.at(-1)}`, Buffer.from([1, 2, 3]));
    // After the clean stop no write was in flight: the bad tail is corrupt (docs/decisions.md §17).
    const afterClean = await runCli(["check", "--data-dir", `${dir}/data`]);
    expect(afterClean.code).toBe(1);
    expect(afterClean.stdout.toString()).toMatch(/CORRUPT .*after a clean stop/);
    expect(afterClean.stdout.toString()).toMatch(/clean-stop\.json: the last stop was clean/);
    const afterCleanJson = await runCli(["check", "--data-dir", `${dir}/data`, "--json"]);
    expect(afterCleanJson.code).toBe(1);
    // As a crash leaves the directory (no clean-stop record): a torn tail, a warning.
    rmSync(`${dir}/data/clean-stop.json`);
    const torn = await runCli(["check", "--data-dir", `${dir}/data`]);
    expect(torn.code).toBe(0);
    expect(torn.stdout.toString()).toMatch(/warning .*torn tail of 3 bytes/);

    const fd = openSync(`${pdir}/${logs[0]}`, "r+");
    writeSync(fd, Buffer.from([0xff]), 0, 1, 60);
    closeSync(fd);
    const corrupt = await runCli(["check", "--data-dir", `${dir}/data`, "--json"]);
    expect(corrupt.code).toBe(1);
    const report = JSON.parse(corrupt.stdout.toString()) as {
      corrupt: number;
      topics: { partitions: { segments: { base_offset: number; corruption: unknown }[] }[] }[];
    };
    expect(report.corrupt).toBe(1);
    expect(report.topics[0].partitions[0].segments[0].base_offset).toBe(0);
    // snake_case keys, exactly the ones docs/storage.md lists for --json.
    const keys = new Set<string>();
    const collect = (value: unknown): void => {
      if (Array.isArray(value)) value.forEach(collect);
      else if (value !== null && typeof value === "object")
        for (const [k, v] of Object.entries(value)) {
          keys.add(k);
          collect(v);
        }
    };
    collect(report);
    collect(JSON.parse(afterCleanJson.stdout.toString()));
    const doc = readFileSync(new URL("../../docs/storage.md", import.meta.url), "utf8");
    const from = doc.indexOf("`--json` prints the whole report");
    expect(from, "the --json shape in docs/storage.md").toBeGreaterThanOrEqual(0);
    const paragraph = doc.slice(from, doc.indexOf("\n\n", from));
    const shapes = [...paragraph.matchAll(/`(\{[^`]*\})`/g)].map((m) => m[1]).join("");
    const documented = new Set([...shapes.matchAll(/"([a-z_]+)"/g)].map((m) => m[1]));
    expect([...keys].sort()).toEqual([...documented].sort());
  });

  it("agrees with start-up on leftovers: a topic left empty by an interrupted create and temp files are warnings, and the start removes them", async () => {
    const { dir } = tempDir();
    const data = `${dir}/data`;
    const broker = await startBroker(data);
    const client = await TcpClient.connect(broker.tcp);
    await client.createTopic({ name: "kept", partitions: 1 });
    await client.close();
    expect(await broker.stop("SIGTERM")).toBe(0);
    // What crashes leave: a create interrupted before topic.json (empty, or holding only its
    // temp), and temps of interrupted writes of a group file and of producers.json.
    mkdirSync(`${data}/topics/empty`);
    mkdirSync(`${data}/topics/half`);
    writeFileSync(`${data}/topics/half/.topic.json.tmp-3`, '{"name":"half"');
    writeFileSync(`${data}/groups/.g.json.tmp-5`, "{");
    writeFileSync(`${data}/.producers.json.tmp-1`, "{");

    const checked = await runCli(["check", "--data-dir", data]);
    const out = checked.stdout.toString();
    expect(checked.code, out + checked.stderr).toBe(0);
    expect(out).not.toMatch(/CORRUPT/);
    expect(out).toMatch(/warning .*topics\/empty: .*interrupted.*; a start removes it/);
    expect(out).toMatch(/warning .*topics\/half: .*interrupted.*; a start removes it/);
    expect(out).toMatch(
      /warning .*groups\/\.g\.json\.tmp-5: temporary file .*; a start removes it/,
    );
    expect(out).toMatch(
      /warning .*\.producers\.json\.tmp-1: temporary file .*; a start removes it/,
    );

    const started = await startBroker(data);
    expect(await started.stop("SIGTERM")).toBe(0);
    for (const gone of [
      "topics/empty",
      "topics/half",
      "groups/.g.json.tmp-5",
      ".producers.json.tmp-1",
    ])
      expect(existsSync(`${data}/${gone}`), gone).toBe(false);
    expect(started.stderr()).toMatch(/recovery\.incomplete_topic_removed/);
    expect(started.stderr()).toMatch(/recovery\.temp_file_removed/);

    const after = await runCli(["check", "--data-dir", data]);
    expect(after.code).toBe(0);
    expect(after.stdout.toString()).toMatch(/0 corrupt, 0 warnings/);
    // And the next start reports nothing left over.
    const again = await startBroker(data);
    expect(await again.stop("SIGTERM")).toBe(0);
    expect(again.stderr()).not.toMatch(
      /recovery\.(stray_file|temp_file_removed|incomplete_topic_removed)/,
    );
  });

  it("agrees with start-up on the metadata start-up reads: an unusable api_keys.json, group file or producers.json is CORRUPT", async () => {
    const { dir } = tempDir();
    const data = `${dir}/data`;
    const made = await runCli([
      "keys",
      "create",
      "--data-dir",
      data,
      "--name",
      "a",
      "--role",
      "admin",
    ]);
    expect(made.code, made.stderr).toBe(0);
    const broker = await startBroker(data);
    const client = await TcpClient.connect({
      ...broker.tcp,
      apiKey: made.stdout.toString().trim(),
    });
    await client.createTopic({ name: "t", partitions: 1 });
    await client.createTopic({ name: "u", partitions: 1 });
    await client.close();
    expect(await broker.stop("SIGTERM")).toBe(0);
    const clean = await runCli(["check", "--data-dir", data]);
    expect(clean.code, clean.stdout.toString() + clean.stderr).toBe(0);
    expect(clean.stdout.toString()).toMatch(/0 corrupt, 0 warnings/);

    // Each as a crash never leaves them, but a person or a failing disk might.
    writeFileSync(`${data}/groups/g.json`, "{ not json");
    writeFileSync(`${data}/producers.json`, '{"version":7}');
    writeFileSync(`${data}/schemas.json`, "[]");
    writeFileSync(`${data}/topics/u/topic.json`, '{"name":"u","partitions":"many","config":{}}');
    writeFileSync(
      `${data}/topics/t/log_start_offsets.json`,
      '{"version":1,"partitions":{"0":"x"}}',
    );
    const degraded = await startBroker(data);
    expect(await degraded.stop("SIGTERM")).toBe(0);
    expect(degraded.stderr()).toMatch(/"event":"recovery.group_unavailable"/);
    expect(degraded.stderr()).toMatch(/"event":"producers.unavailable"/);
    expect(degraded.stderr()).toMatch(/"event":"registry.unavailable"/);
    expect(degraded.stderr()).toMatch(/"event":"recovery.topic_unavailable","topic":"t"/);
    expect(degraded.stderr()).toMatch(/"event":"recovery.topic_unavailable","topic":"u"/);
    writeFileSync(`${data}/api_keys.json`, '{"version":1,"keys":[{"id":"x"}]}');
    const refused = await runCli([
      "serve",
      "--data-dir",
      data,
      "--http-port",
      "0",
      "--tcp-port",
      "0",
    ]);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/api_keys\.json/);

    // A producer journal whose first entry is damaged, with valid entries after it.
    const header = readFileSync(`${data}/producers.journal`).subarray(0, journalHeaderBytes);
    const journalEntry = (n: number) =>
      encodeJournalEntry({
        timestampMs: 1_700_000_000_000,
        producerId: "p1",
        epoch: 0,
        topic: "t",
        partition: 0,
        baseSequence: n,
        batchCount: 1,
        firstIndex: 0,
        count: 1,
        baseOffset: n,
        fingerprint: 7,
      });
    const bad = journalEntry(0);
    bad.fill(0xff, 0, 4);
    writeFileSync(
      `${data}/producers.journal`,
      Buffer.concat([header, bad, journalEntry(1), journalEntry(2)]),
    );

    const checked = await runCli(["check", "--data-dir", data]);
    const out = checked.stdout.toString();
    expect(checked.code, out + checked.stderr).toBe(1);
    expect(out).toMatch(
      /CORRUPT .*producers\.journal: .*bad entry with valid entries after it \(the entry at byte 16 .* 2 entries after it.*idempotent produce unavailable/,
    );
    expect(out).toMatch(/CORRUPT .*api_keys\.json: .*a start refuses to run/);
    expect(out).toMatch(/CORRUPT .*groups\/g\.json: .*a start makes the group unavailable/);
    expect(out).toMatch(/CORRUPT .*producers\.json: .*idempotent produce unavailable/);
    expect(out).toMatch(/CORRUPT topic t: log_start_offsets\.json cannot be read: .*unavailable/);
    expect(out).toMatch(/CORRUPT topic u: topic\.json cannot be read: Invalid partition count/);
    expect(out).toMatch(/CORRUPT .*schemas\.json: .*schema registry unavailable/);
    expect(out).toMatch(/7 corrupt/);

    // A torn last entry is what a crash leaves: a warning, which a start cuts off.
    writeFileSync(
      `${data}/producers.journal`,
      Buffer.concat([header, journalEntry(1), journalEntry(2).subarray(0, 9)]),
    );
    const torn = (await runCli(["check", "--data-dir", data])).stdout.toString();
    expect(torn).toMatch(
      /warning .*producers\.journal: .*torn write \(9 bytes from byte .*a start cuts it off/,
    );
    expect(torn).toMatch(/6 corrupt/);
  });
});
