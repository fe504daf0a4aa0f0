/**
 * API keys (src/auth/key-format.ts, src/auth/key-store.ts): the key text, the store over a
 * simulated disk — created keys verify, wrong ones do not, the file holds hashes only, revocation,
 * reload, the once-a-minute last-used time — and files that refuse a start, naming the file.
 */
import { describe, expect, it } from "vitest";
import { constantTimeEqual, toBase64Url } from "../../src/auth/crypto.ts";
import {
  apiKeyChars,
  apiKeyIdChars,
  apiKeyPrefix,
  generateApiKey,
  keyHash,
  parseApiKeyId,
} from "../../src/auth/key-format.ts";
import { KeyStoreError, type KeyStore } from "../../src/auth/key-store.ts";
import { BrokerError } from "../../src/broker/errors.ts";
import { MemoryFileSystem } from "../../src/fs/memory.ts";
import { fromUtf8, utf8 } from "../../src/lib/bytes.ts";
import { ManualClock } from "../../src/lib/clock.ts";
import { systemKeyCrypto } from "../../src/runtime/crypto.ts";
import { openTestKeyStore, seededKeyCrypto } from "../helpers/keys.ts";

async function fileText(fs: MemoryFileSystem, path = "/data/api_keys.json"): Promise<string> {
  return fromUtf8(fs.readFileSync(path));
}

async function refusal(promise: Promise<unknown>): Promise<BrokerError> {
  const error = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(BrokerError);
  return error as BrokerError;
}

describe("the key text", () => {
  it("is esb_, 16 hex digits of id, _, 43 base64url characters: 256 random bits of secret", () => {
    const made = generateApiKey(systemKeyCrypto);
    expect(made.text).toMatch(/^esb_[0-9a-f]{16}_[A-Za-z0-9_-]{43}$/);
    expect(made.text).toHaveLength(apiKeyChars);
    expect(parseApiKeyId(made.text)).toBe(made.id);
    // 43 characters of 6 bits carry the 32 bytes (256 bits) drawn.
    expect(toBase64Url(new Uint8Array(32))).toHaveLength(43);
    const other = generateApiKey(systemKeyCrypto);
    expect(other.text).not.toBe(made.text);
  });

  it("parses only well-formed keys, refusing by length before anything else", () => {
    const good = `esb_0123456789abcdef_${"A".repeat(43)}`;
    expect(parseApiKeyId(good)).toBe("0123456789abcdef");
    for (const bad of [
      "",
      good.slice(0, -1),
      `${good}A`,
      good.replace("esb_", "esc_"),
      good.replace("0123", "012G"),
      good.replace("0123", "0123".toUpperCase().replace("0", "A")),
      `esb_0123456789abcdef-${"A".repeat(43)}`,
      `esb_0123456789abcdef_${"A".repeat(42)}=`,
      `esb_0123456789abcdef_${"A".repeat(42)}+`,
      "x".repeat(100_000),
    ])
      expect(parseApiKeyId(bad), bad.slice(0, 80)).toBeNull();
  });

  it("is stored as sha256: and 64 hex digits of its text", () => {
    const hash = keyHash(systemKeyCrypto, "esb_x");
    expect(hash).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(hash).toBe(keyHash(systemKeyCrypto, "esb_x"));
    expect(hash).not.toBe(keyHash(systemKeyCrypto, "esb_y"));
  });

  it("constant-time comparison compares every byte", () => {
    expect(constantTimeEqual(utf8("abc"), utf8("abc"))).toBe(true);
    expect(constantTimeEqual(utf8("abc"), utf8("abd"))).toBe(false);
    expect(constantTimeEqual(utf8("xbc"), utf8("abc"))).toBe(false);
    expect(constantTimeEqual(utf8("ab"), utf8("abc"))).toBe(false);
  });
});

describe("the key store", () => {
  it("starts with authentication off when api_keys.json does not exist, and turns it on with the first key", async () => {
    const { keys, fs } = await openTestKeyStore();
    expect(keys.enabled).toBe(false);
    expect(await fs.stat("/data/api_keys.json")).toBeNull();
    const { key, info } = await keys.create({ name: "admin", role: "admin" });
    expect(keys.enabled).toBe(true);
    expect(info).toMatchObject({
      name: "admin",
      role: "admin",
      topics: [],
      groups: [],
      last_used_ms: null,
    });
    expect(keys.verify(key)).toMatchObject({
      kind: "key",
      id: info.id,
      name: "admin",
      role: "admin",
    });
  });

  it("keeps only hashes and metadata in api_keys.json, never the key or its secret part", async () => {
    const mem = new MemoryFileSystem();
    const { keys } = await openTestKeyStore({ fs: mem });
    const made = [
      await keys.create({ name: "admin", role: "admin" }),
      await keys.create({ name: "ingest", role: "producer", topics: ["orders.*"] }),
      await keys.create({
        name: "reader",
        role: "consumer",
        topics: ["orders.*"],
        groups: ["billing"],
      }),
    ];
    const text = await fileText(mem);
    const file = JSON.parse(text);
    expect(file.version).toBe(1);
    expect(file.keys.map((k: { name: string }) => k.name)).toEqual(["admin", "ingest", "reader"]);
    for (const { key, info } of made) {
      // esb_<id>_<secret>: the secret is base64url and may hold "_" itself.
      const secret = key.slice(apiKeyPrefix.length + apiKeyIdChars + 1);
      for (const form of [
        key,
        secret,
        Buffer.from(key).toString("base64"),
        Buffer.from(key).toString("hex"),
        Buffer.from(secret).toString("hex"),
      ])
        expect(text.includes(form), `${info.name}: a form of the key is in the file`).toBe(false);
      const entry = file.keys.find((k: { id: string }) => k.id === info.id);
      expect(entry.hash).toBe(keyHash(systemKeyCrypto, key));
    }
    for (const info of keys.list()) expect(Object.keys(info)).not.toContain("hash");
  });

  it("refuses a wrong secret, an unknown id and malformed text", async () => {
    const { keys } = await openTestKeyStore();
    const { key } = await keys.create({ name: "admin", role: "admin" });
    const last = key.at(-1) === "A" ? "B" : "A";
    expect(keys.verify(key.slice(0, -1) + last)).toBeNull();
    expect(keys.verify(key.replace(/^esb_[0-9a-f]{16}/, "esb_ffffffffffffffff"))).toBeNull();
    expect(keys.verify(`${key} `)).toBeNull();
    expect(keys.verify("")).toBeNull();
  });

  it("checks what a new key may do, with errors naming the field", async () => {
    const { keys } = await openTestKeyStore();
    const cases: [Parameters<KeyStore["create"]>[0], RegExp][] = [
      [{ name: "a", role: "root" }, /role must be admin, producer or consumer/],
      [{ name: "a", role: "admin", topics: ["x"] }, /admin key takes no topic or group patterns/],
      [{ name: "a", role: "producer" }, /needs at least one topic pattern/],
      [{ name: "a", role: "producer", topics: [] }, /needs at least one topic pattern/],
      [
        { name: "a", role: "producer", topics: ["x"], groups: ["g"] },
        /producer key takes no group patterns/,
      ],
      [{ name: "a", role: "consumer", topics: ["x*y"] }, /only at the end/],
      [{ name: "a b", role: "admin" }, /key name/],
      [{ name: "", role: "admin" }, /key name/],
      [{ name: "x".repeat(65), role: "admin" }, /key name/],
      [{ name: 3, role: "admin" }, /key name: it must be a string/],
    ];
    for (const [spec, message] of cases) {
      const error = await refusal(keys.create(spec));
      expect(error.kind.code, JSON.stringify(spec)).toBe("invalid_request");
      expect(error.message).toMatch(message);
    }
    expect(keys.enabled).toBe(false);
    await keys.create({ name: "a", role: "consumer", topics: ["x"] });
    expect((await refusal(keys.create({ name: "a", role: "admin" }))).kind.code).toBe("key_exists");
  });

  it("revokes a key at once (before the file is written), tells listeners, and leaves it out of the file", async () => {
    const mem = new MemoryFileSystem();
    const { keys } = await openTestKeyStore({ fs: mem });
    const admin = await keys.create({ name: "admin", role: "admin" });
    const ingest = await keys.create({ name: "ingest", role: "producer", topics: ["t"] });
    const principal = keys.verify(ingest.key)!;
    const invalidated: string[] = [];
    keys.onChange((change) => invalidated.push(...change.invalidated.map((p) => p.name)));
    const revoking = keys.revoke("ingest");
    expect(keys.verify(ingest.key)).toBeNull();
    expect(keys.isCurrent(principal)).toBe(false);
    expect(invalidated).toEqual(["ingest"]);
    expect(await revoking).toMatchObject({ name: "ingest", id: ingest.info.id });
    expect(JSON.parse(await fileText(mem)).keys.map((k: { name: string }) => k.name)).toEqual([
      "admin",
    ]);
    expect(keys.verify(admin.key)).not.toBeNull();
    expect((await refusal(keys.revoke("ingest"))).kind.code).toBe("key_not_found");
    // Revoking the last key keeps authentication on.
    await keys.revoke("admin");
    expect(keys.enabled).toBe(true);
    expect(keys.size).toBe(0);
  });

  it("a revoke whose file write fails keeps the key refused and writes it out on the next try", async () => {
    const mem = new MemoryFileSystem();
    const { keys, path } = await openTestKeyStore({ fs: mem });
    const ingest = await keys.create({ name: "ingest", role: "producer", topics: ["t"] });
    mem.faults.failNext({ op: "rename", code: "EIO" });
    const error = await refusal(keys.revoke("ingest"));
    expect(error.message).toMatch(/Cannot revoke key "ingest"/);
    expect(keys.verify(ingest.key)).toBeNull();
    expect(JSON.parse(await fileText(mem, path)).keys).toHaveLength(1);
    expect((await refusal(keys.create({ name: "ingest", role: "admin" }))).kind.code).toBe(
      "key_exists",
    );
    await keys.revoke("ingest");
    expect(JSON.parse(await fileText(mem, path)).keys).toHaveLength(0);
  });

  it("a create whose file write fails makes no usable key", async () => {
    const mem = new MemoryFileSystem();
    const { keys } = await openTestKeyStore({ fs: mem });
    mem.faults.failNext({ op: "sync", code: "ENOSPC" });
    const error = await refusal(keys.create({ name: "admin", role: "admin" }));
    expect(error.kind.code).toBe("storage_error");
    expect(keys.size).toBe(0);
    expect(keys.list()).toEqual([]);
  });

  it("reopens with the same keys", async () => {
    const mem = new MemoryFileSystem();
    const first = await openTestKeyStore({ fs: mem });
    const made = await first.keys.create({
      name: "reader",
      role: "consumer",
      topics: ["a", "b.*"],
      groups: ["g*"],
    });
    await first.keys.close();
    const second = await openTestKeyStore({ fs: mem, seed: 2 });
    expect(second.keys.enabled).toBe(true);
    expect(second.keys.verify(made.key)).toMatchObject({
      name: "reader",
      topics: ["a", "b.*"],
      groups: ["g*"],
    });
    expect(second.keys.list()).toEqual([made.info]);
  });

  it("writes last_used_ms at most once a minute per key", async () => {
    const mem = new MemoryFileSystem();
    const clock = new ManualClock(1_700_000_000_000);
    const { keys, path } = await openTestKeyStore({ fs: mem, clock });
    const { key } = await keys.create({ name: "admin", role: "admin" });
    const lastUsed = async () => {
      await new Promise((r) => setTimeout(r, 0));
      await keys
        .create({ name: `probe${clock.nowMs()}`, role: "admin" })
        .then((p) => keys.revoke(p.info.name));
      return JSON.parse(await fileText(mem, path)).keys[0].last_used_ms;
    };
    const renames = () => mem.mutationCount;
    const use = () => keys.noteUse(keys.verify(key)!);
    use();
    expect(await lastUsed()).toBe(1_700_000_000_000);
    const before = renames();
    clock.advance(30_000);
    for (let i = 0; i < 100; i++) use();
    await new Promise((r) => setTimeout(r, 0));
    expect(renames()).toBe(before); // nothing written within the minute
    clock.advance(30_000);
    use();
    expect(await lastUsed()).toBe(1_700_000_060_000);
  });

  it("reload keeps unchanged keys' principals, invalidates removed and changed ones, and keeps the old keys when the file is bad", async () => {
    const mem = new MemoryFileSystem();
    const { keys, path } = await openTestKeyStore({ fs: mem });
    const a = await keys.create({ name: "a", role: "admin" });
    const b = await keys.create({ name: "b", role: "producer", topics: ["t"] });
    const c = await keys.create({ name: "c", role: "consumer", topics: ["t"] });
    const pa = keys.verify(a.key)!;
    const pb = keys.verify(b.key)!;
    const file = JSON.parse(await fileText(mem, path));
    file.keys = file.keys.filter((k: { name: string }) => k.name !== "c");
    file.keys.find((k: { name: string }) => k.name === "b").topics = ["t", "u"];
    mem.writeFileSync(path, utf8(JSON.stringify(file)));
    const invalidated: string[] = [];
    keys.onChange((change) => invalidated.push(...change.invalidated.map((p) => p.name)));
    expect(await keys.reload()).toEqual({ keys: 2, invalidated: 2 });
    expect(invalidated.sort()).toEqual(["b", "c"]);
    expect(keys.verify(a.key)).toBe(pa);
    expect(keys.isCurrent(pb)).toBe(false);
    expect(keys.verify(b.key)).toMatchObject({ topics: ["t", "u"] });
    expect(keys.verify(c.key)).toBeNull();

    mem.writeFileSync(path, utf8("{ not json"));
    await expect(keys.reload()).rejects.toThrow(KeyStoreError);
    expect(keys.verify(a.key)).toBe(pa);
    await mem.unlink(path);
    await expect(keys.reload()).rejects.toThrow(/missing.*stay in force/);
    expect(keys.verify(a.key)).toBe(pa);
  });

  describe("never writes over a hand edit it has not loaded (attack18 F7)", () => {
    async function edited() {
      const mem = new MemoryFileSystem();
      const clock = new ManualClock(1_700_000_000_000);
      const opened = await openTestKeyStore({ fs: mem, clock });
      const { keys, path } = opened;
      const admin = await keys.create({ name: "admin", role: "admin" });
      const cons = await keys.create({ name: "cons", role: "consumer", topics: ["t"] });
      // The operator removes "cons" by hand and adds "extra" (copied from another file), no SIGHUP yet.
      const file = JSON.parse(await fileText(mem, path));
      const extra = { ...file.keys[1], id: "00000000000000aa", name: "extra" };
      file.keys = [file.keys[0], extra];
      mem.writeFileSync(path, utf8(JSON.stringify(file)));
      return { ...opened, mem, clock, admin, cons };
    }
    const names = async (mem: MemoryFileSystem, path: string) =>
      JSON.parse(await fileText(mem, path)).keys.map((k: { name: string }) => k.name);

    it("skips the last_used_ms write and logs it, so the removed key stays removed", async () => {
      const { keys, mem, path, admin, logger, clock } = await edited();
      clock.advance(120_000);
      keys.noteUse(keys.verify(admin.key)!);
      await keys.close();
      expect(await names(mem, path)).toEqual(["admin", "extra"]);
      expect(logger.events.some((e) => e.event === "auth.keys_file_changed")).toBe(true);
    });

    it("the SIGHUP after it revokes the removed key", async () => {
      const { keys, admin, cons, clock } = await edited();
      clock.advance(120_000);
      keys.noteUse(keys.verify(admin.key)!);
      await new Promise((r) => setTimeout(r, 0));
      await keys.reload();
      expect(keys.verify(cons.key)).toBeNull();
      expect(keys.verify(admin.key)).not.toBeNull();
    });

    it("a create loads the edit first, keeping the hand-added key and the removal", async () => {
      const { keys, mem, path, cons, logger } = await edited();
      await keys.create({ name: "new", role: "producer", topics: ["t"] });
      expect(await names(mem, path)).toEqual(["admin", "extra", "new"]);
      expect(keys.verify(cons.key)).toBeNull();
      expect(
        logger.events.some(
          (e) => e.event === "auth.keys_reloaded" && e.fields.reason === "changed_on_disk",
        ),
      ).toBe(true);
    });

    it("a revoke while the edited file cannot be used is refused, and the file is left as it is", async () => {
      const { keys, mem, path } = await edited();
      mem.writeFileSync(path, utf8("{ half an edit"));
      const error = await refusal(keys.revoke("admin"));
      expect(error.kind.code).toBe("unavailable");
      expect(error.message).toMatch(/changed by hand.*SIGHUP/);
      expect(await fileText(mem, path)).toBe("{ half an edit");
    });

    it("writes as before when nobody edited the file", async () => {
      const mem = new MemoryFileSystem();
      const clock = new ManualClock(1_700_000_000_000);
      const { keys, path, logger } = await openTestKeyStore({ fs: mem, clock });
      const admin = await keys.create({ name: "admin", role: "admin" });
      clock.advance(120_000);
      keys.noteUse(keys.verify(admin.key)!);
      await keys.close();
      expect(JSON.parse(await fileText(mem, path)).keys[0].last_used_ms).toBe(1_700_000_120_000);
      expect(logger.events.some((e) => e.event === "auth.keys_file_changed")).toBe(false);
    });
  });

  describe("refuses to open a file it cannot use, naming the file and never quoting it", () => {
    const hash = `sha256:${"ab".repeat(32)}`;
    const entry = {
      id: "0123456789abcdef",
      name: "k",
      role: "admin",
      topics: [],
      groups: [],
      hash,
      created_ms: 1,
      last_used_ms: null,
    };
    const cases: [string, string, RegExp][] = [
      ["an empty file", "", /file is empty/],
      ["text that is not JSON", `{"version":1,"keys":[${JSON.stringify(entry)}`, /not valid JSON/],
      ["an array", "[]", /must hold a JSON object/],
      ["another version", JSON.stringify({ version: 2, keys: [] }), /"version" must be 1/],
      ["keys not a list", JSON.stringify({ version: 1, keys: {} }), /"keys" must be a list/],
      [
        "a bad id",
        JSON.stringify({ version: 1, keys: [{ ...entry, id: "XYZ" }] }),
        /keys\[0\]\.id/,
      ],
      [
        "a bad hash",
        JSON.stringify({ version: 1, keys: [{ ...entry, hash: "md5:00" }] }),
        /keys\[0\]\.hash/,
      ],
      [
        "an unknown role",
        JSON.stringify({ version: 1, keys: [{ ...entry, role: "root" }] }),
        /keys\[0\]: .*role/,
      ],
      [
        "an unknown field",
        JSON.stringify({ version: 1, keys: [{ ...entry, secret: "x" }] }),
        /unknown field "secret"/,
      ],
      [
        "a repeated id",
        JSON.stringify({ version: 1, keys: [entry, { ...entry, name: "k2" }] }),
        /keys\[1\]\.id repeats/,
      ],
      [
        "a repeated name",
        JSON.stringify({ version: 1, keys: [entry, { ...entry, id: "fedcba9876543210" }] }),
        /keys\[1\]\.name repeats/,
      ],
      [
        "a bad created_ms",
        JSON.stringify({ version: 1, keys: [{ ...entry, created_ms: -1 }] }),
        /created_ms/,
      ],
    ];
    for (const [what, content, message] of cases) {
      it(what, async () => {
        const mem = new MemoryFileSystem();
        mem.writeFileSync("/data/api_keys.json", utf8(content));
        const error = await openTestKeyStore({ fs: mem }).then(
          () => null,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(KeyStoreError);
        const text = (error as Error).message;
        expect(text).toMatch(/^Cannot use the API key file \/data\/api_keys\.json: /);
        expect(text).toMatch(message);
        expect(text).not.toContain(hash.slice(7));
      });
    }
  });
});

describe("seeded key crypto", () => {
  it("replays the same keys from the same seed (for simulations only)", () => {
    expect(generateApiKey(seededKeyCrypto(5)).text).toBe(generateApiKey(seededKeyCrypto(5)).text);
    expect(generateApiKey(seededKeyCrypto(5)).text).not.toBe(
      generateApiKey(seededKeyCrypto(6)).text,
    );
  });
});
