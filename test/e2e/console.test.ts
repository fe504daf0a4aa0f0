/**
 * End-to-end: the web console (docs/console.md) in headless Chromium (Debian's `chromium`, driven
 * by `playwright-core`), served by the real process on the node and binary targets (targets.ts
 * `nodeAndBinaryE2eFiles`: Deno and Bun run the same sources the Node bundle is built from).
 *
 * - Every view loads from the process and shows what the test made through the API: topics with
 *   partitions, sizes and high watermarks; a partition's live tail showing a record produced after
 *   the page opened; consumer groups with members, assignments and lag; storage health.
 * - The forms work: create a topic, change its retention, produce a test record (each checked
 *   through the API afterwards).
 * - The key is asked for first and kept in sessionStorage only (no cookie is ever set).
 * - Record bytes never run: keys and values holding markup and script are shown as text, no
 *   dialog opens, and no console error or page error happens at all.
 * - No request leaves the broker's loopback origin.
 * - Without a key, the console's pages hold no data and the API answers 401; a cross-site
 *   state-changing request is refused 403 even on a broker without keys.
 *
 * A screenshot of each view is saved under test-results/console/<target>/.
 */
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { type Browser, chromium, type Page } from "playwright-core";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { consoleContentSecurityPolicy } from "../../src/transport/http/console.ts";
import {
  chromium as chromiumTool,
  ensureDebianTool,
  installHookTimeoutMs,
} from "../helpers/system-tools.ts";
import { tempDir } from "../helpers/tmp.ts";
import { type BrokerProcess, startBroker, target } from "./harness.ts";
import { offlineAdminKey } from "./helpers.ts";
import { repoRoot } from "./targets.ts";

const running: BrokerProcess[] = [];
let browser: Browser;

beforeAll(async () => {
  ensureDebianTool(chromiumTool);
  browser = await chromium.launch({
    executablePath: "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-gpu"],
  });
}, installHookTimeoutMs);
afterAll(async () => {
  await browser?.close();
});
afterEach(async () => {
  for (const b of running.splice(0)) await b.stop("SIGKILL");
});

const screenshots = join(repoRoot, "test-results", "console", target);

const hostile = {
  key: '<img src=x onerror="alert(1)">',
  value: '</script><script>alert(2)</script><a href="javascript:alert(3)">x</a>',
};

/** A page that records everything the console must not do. */
async function watchedPage(origin: string): Promise<{ page: Page; problems: string[] }> {
  const problems: string[] = [];
  const context = await browser.newContext({ viewport: { width: 1100, height: 800 } });
  const page = await context.newPage();
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning")
      problems.push(`console ${m.type()}: ${m.text()}`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("dialog", (d) => {
    problems.push(`dialog: ${d.message()}`);
    void d.dismiss();
  });
  page.on("request", (r) => {
    const url = new URL(r.url());
    if (url.origin !== origin) problems.push(`request left the broker: ${r.url()}`);
  });
  page.on("response", (r) => {
    if (r.headers()["set-cookie"] !== undefined) problems.push(`a cookie was set by ${r.url()}`);
  });
  return { page, problems };
}

async function shot(page: Page, name: string): Promise<void> {
  mkdirSync(screenshots, { recursive: true });
  await page.screenshot({ path: join(screenshots, `${name}.png`), fullPage: true });
}

describe(`[${target}] the web console in headless Chromium`, () => {
  it("every view shows what the API made, the forms work, the tail follows, and nothing runs", async () => {
    const { dir } = tempDir();
    const dataDir = join(dir, "data");
    const { key: admin } = await offlineAdminKey(dataDir, dir);
    const broker = await startBroker(dataDir);
    running.push(broker);
    const api = async (method: string, path: string, body?: unknown): Promise<any> => {
      const res = await fetch(`${broker.httpUrl}${path}`, {
        method,
        headers: { authorization: `Bearer ${admin}`, "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      expect(res.status, `${method} ${path}`).toBeLessThan(300);
      return res.status === 204 ? undefined : res.json();
    };
    await api("POST", "/v1/topics", { name: "orders", partitions: 2 });
    await api("POST", "/v1/topics/orders/records", {
      records: [
        { key: hostile.key, value: hostile.value, partition: 0 },
        { value: "second", partition: 0 },
        { value: "third", partition: 1 },
      ],
    });
    await api("POST", "/v1/groups/billing/offsets", {
      offsets: [{ topic: "orders", partition: 0, offset: 1 }],
    });

    const { page, problems } = await watchedPage(broker.httpUrl);
    await page.goto(`${broker.httpUrl}/console`);
    // The broker has keys and this tab none: the key form comes first.
    await page.getByLabel("Key", { exact: true }).waitFor();
    await shot(page, "0-key");
    await page.getByLabel("Key", { exact: true }).fill(admin);
    await page.getByRole("button", { name: "Use this key" }).click();

    // Topics: name, partitions, size, high watermarks.
    const row = page.locator("tr", { has: page.getByRole("link", { name: "orders" }) });
    await row.waitFor();
    expect(await row.locator("td").allInnerTexts()).toEqual(
      expect.arrayContaining(["orders", "2", "3"]),
    );
    // Create a topic with the form.
    await page.getByLabel("Name", { exact: true }).fill("created-in-console");
    await page.getByLabel("Partitions", { exact: true }).fill("3");
    await page.getByLabel("Retention (ms, -1 = forever)").fill("3600000");
    await page.getByLabel("Timestamps").selectOption("log_append_time");
    await page.getByRole("button", { name: "Create" }).click();
    await page.getByText("Created topic created-in-console with 3 partitions").waitFor();
    await page.getByRole("link", { name: "created-in-console" }).waitFor();
    const created = await api("GET", "/v1/topics/created-in-console");
    expect(created.partitions).toHaveLength(3);
    expect(created.config.retention_ms).toBe(3_600_000);
    expect(created.config.timestamp_type).toBe("log_append_time");
    await shot(page, "1-topics");

    // A topic: its partitions, then change retention and produce a test record.
    await page.getByRole("link", { name: "orders" }).click();
    await page.getByRole("heading", { name: "Topic orders" }).waitFor();
    await page.getByRole("cell", { name: "fenced" }).count();
    await page.getByLabel("Retention (ms, -1 = forever)").fill("86400000");
    await page.getByRole("button", { name: "Apply" }).click();
    await page.getByText("retention_ms is now 86400000").waitFor();
    expect((await api("GET", "/v1/topics/orders")).config.retention_ms).toBe(86_400_000);
    await page.getByLabel("Key", { exact: true }).fill("from-console");
    await page.getByLabel("Value", { exact: true }).fill("hello from the console");
    await page.getByLabel("Partition", { exact: true }).fill("1");
    await page.getByRole("button", { name: "Produce" }).click();
    await page.getByText("Appended at partition 1, offset 1").waitFor();
    const fetched = await api("GET", "/v1/topics/orders/partitions/1/records?offset=1");
    expect(fetched.records[0]).toMatchObject({
      key: "from-console",
      value: "hello from the console",
    });
    await shot(page, "2-topic");

    // The live tail of partition 0: a record produced after the page opened appears, as text.
    await page.getByRole("link", { name: "Live tail" }).first().click();
    await page.getByText("Following new records").waitFor();
    await api("POST", "/v1/topics/orders/records", {
      records: [{ key: hostile.key, value: `live: ${hostile.value}`, partition: 0 }],
    });
    const liveValue = page.getByRole("cell", { name: `live: ${hostile.value}`, exact: true });
    // 60 s: beside the parallel group's files the record once took over 30 s to show (CI).
    await liveValue.waitFor({ timeout: 60_000 });
    expect(await page.getByRole("cell", { name: hostile.key, exact: true }).count()).toBe(1);
    expect(await page.locator("main img, main script, main a[href^='javascript']").count()).toBe(0);
    await shot(page, "3-tail");

    // Consumer groups: members, assignments, committed offsets and lag.
    const member = await api("POST", "/v1/groups/readers/members", { topics: ["orders"] });
    await page.getByRole("link", { name: "Consumer groups" }).click();
    await page.getByRole("heading", { name: /Group billing/ }).waitFor();
    const billing = page.locator("section", {
      has: page.getByRole("heading", { name: /Group billing/ }),
    });
    // orders/0 now holds 3 records and billing committed 1: lag 2.
    const lagRow = billing
      .locator("tr", { has: page.getByRole("cell", { name: "orders", exact: true }) })
      .first();
    expect(await lagRow.locator("td").allInnerTexts()).toEqual(["orders", "0", "1", "3", "2", ""]);
    const readers = page.locator("section", {
      has: page.getByRole("heading", { name: /Group readers/ }),
    });
    await readers.getByRole("cell", { name: member.member_id }).first().waitFor();
    // The member, its topics and its assignments, then both partitions owned by it.
    expect(await readers.getByRole("cell", { name: member.member_id }).count()).toBe(3);
    await readers.getByRole("cell", { name: "orders/0, orders/1" }).waitFor();
    await shot(page, "4-groups");

    // Storage health.
    await page.getByRole("link", { name: "Storage" }).click();
    await page.getByText("Fenced partitions: 0").waitFor();
    await page.getByText("Corrupt segments: 0").waitFor();
    // The data directory's file system (statfs), as the broker saw it: "12.3 GiB free of 40.0 GiB (30 %)".
    await page
      .getByText(/^Disk space: [\d.]+ [KMGT]?i?B free of [\d.]+ [KMGT]?i?B \(\d+ %\)$/)
      .waitFor();
    await page.getByRole("cell", { name: "orders/0" }).first().waitFor();
    await shot(page, "5-storage");

    // On a phone-sized screen the topics view fits its width (tables scroll inside their box).
    await page.setViewportSize({ width: 390, height: 844 });
    await page.getByRole("link", { name: "Topics" }).click();
    await page.getByRole("link", { name: "orders" }).waitFor();
    expect(
      await page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth),
    ).toBeLessThanOrEqual(390);
    await shot(page, "6-phone-topics");

    // The key stayed in this tab's sessionStorage, and nowhere a cookie could carry it.
    expect(await page.evaluate(() => (globalThis as any).sessionStorage.length)).toBe(1);
    expect(await page.context().cookies()).toEqual([]);
    // A new tab (a new browser context) must ask again.
    const other = await watchedPage(broker.httpUrl);
    await other.page.goto(`${broker.httpUrl}/console#/groups`);
    await other.page.getByLabel("Key", { exact: true }).waitFor();
    await other.page.context().close();
    await page.context().close();
    expect([...problems, ...other.problems]).toEqual([]);
  }, 120_000);

  it("without a key the console holds no data; headers forbid inline code; cross-site writes are refused", async () => {
    const { dir } = tempDir();
    // No keys at all: only loopback, and a cross-site form is the danger that remains.
    const broker = await startBroker(join(dir, "data"));
    running.push(broker);
    for (const path of ["/console", "/console/app.js", "/console/app.css", "/console/icon.svg"]) {
      const res = await fetch(`${broker.httpUrl}${path}`);
      expect(res.status, path).toBe(200);
      expect(res.headers.get("content-security-policy")).toBe(consoleContentSecurityPolicy);
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(res.headers.get("x-frame-options")).toBe("DENY");
      expect(res.headers.get("set-cookie")).toBeNull();
    }
    expect(consoleContentSecurityPolicy).not.toMatch(/unsafe-inline|unsafe-eval/);
    const api = await fetch(`${broker.httpUrl}/v1/topics`);
    expect(api.headers.get("content-type")).toBe("application/json");
    expect(api.headers.get("x-content-type-options")).toBe("nosniff");
    // A form on another site posting to the broker: refused before anything runs.
    const evil = await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { origin: "http://evil.example", "content-type": "text/plain" },
      body: '{"name":"planted"}',
    });
    expect(evil.status).toBe(403);
    expect(((await evil.json()) as any).error).toMatchObject({
      code: "forbidden",
      details: { reason: "cross_site" },
    });
    const fetchMetadata = await fetch(`${broker.httpUrl}/v1/topics/orders`, {
      method: "DELETE",
      headers: { "sec-fetch-site": "cross-site" },
    });
    expect(fetchMetadata.status).toBe(403);
    expect(((await (await fetch(`${broker.httpUrl}/v1/topics`)).json()) as any).topics).toEqual([]);
    // The same request from the broker's own origin (the console) is served.
    const own = await fetch(`${broker.httpUrl}/v1/topics`, {
      method: "POST",
      headers: { origin: broker.httpUrl, "content-type": "application/json" },
      body: '{"name":"mine"}',
    });
    expect(own.status).toBe(201);
  });

  it("with keys, the console's API calls without a key are 401 and carry no data; /console/ redirects to the page", async () => {
    const { dir } = tempDir();
    const dataDir = join(dir, "data");
    await offlineAdminKey(dataDir, dir);
    const broker = await startBroker(dataDir);
    running.push(broker);
    for (const path of [
      "/v1/topics",
      "/v1/groups",
      "/v1/admin/storage",
      "/v1/topics/x/partitions/0/stream",
    ]) {
      const res = await fetch(`${broker.httpUrl}${path}`);
      expect(res.status, path).toBe(401);
      expect(((await res.json()) as any).error.code).toBe("unauthenticated");
    }
    const page = await (await fetch(`${broker.httpUrl}/console`)).text();
    expect(page).not.toMatch(/topic|group|offset/i);
    expect(((await (await fetch(`${broker.httpUrl}/readyz`)).json()) as any).api_keys).toBe(true);
    // Typed with a trailing slash, the address leads to the page, not to a 401 of the API.
    const slash = await fetch(`${broker.httpUrl}/console/?x=1`, { redirect: "manual" });
    expect(slash.status).toBe(308);
    expect(slash.headers.get("location")).toBe("/console?x=1");
    const followed = await fetch(new URL(slash.headers.get("location")!, broker.httpUrl));
    expect(followed.status).toBe(200);
    expect(followed.headers.get("content-type")).toBe("text/html; charset=utf-8");
  });
});
