/** Keeps docs/protocol.md true: its error table against the code's, its hex examples against the encoder. */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { Errors } from "../../src/broker/errors.ts";
import { encodeProduceRequest, encodeProduceResponse } from "../../src/protocol/apis/produce.ts";
import { encodeErrorResponse } from "../../src/protocol/envelope.ts";
import { EntryBatchBuilder } from "../../src/storage/record.ts";
import { protocolDocExample as example, text } from "../helpers/wire.ts";

const doc = readFileSync(new URL("../../docs/protocol.md", import.meta.url), "utf8");

/** Rows of the error table: `| tcp | `code` | retriable | http | meaning |`. */
function errorRows(): { tcp: number; code: string; retriable: string; http: number }[] {
  const start = doc.indexOf("<!-- error-table");
  expect(start).toBeGreaterThanOrEqual(0);
  const rows = [];
  for (const line of doc.slice(start).split("\n").slice(1)) {
    if (!line.startsWith("|")) {
      if (rows.length > 0) break;
      continue;
    }
    const cells = line.split("|").map((c) => c.trim());
    const match = /^`([a-z_]+)`$/.exec(cells[2]);
    if (!match) continue;
    rows.push({
      tcp: Number(cells[1]),
      code: match[1],
      retriable: cells[3],
      http: Number(cells[4]),
    });
  }
  return rows;
}

describe("docs/protocol.md", () => {
  it("lists every row of the error table with its number, code, retriability and HTTP status", () => {
    const rows = errorRows();
    for (const kind of Object.values(Errors)) {
      expect(rows).toContainEqual({
        tcp: kind.tcp,
        code: kind.code,
        retriable: kind.retriable ? "yes" : "no",
        http: kind.http,
      });
    }
  });

  it("lists no error that the table does not have", () => {
    const known = Object.values(Errors).map((k) => k.code);
    for (const row of errorRows()) expect(known).toContain(row.code);
    expect(errorRows().length).toBe(known.length);
  });

  it("shows the produce request example exactly as the encoder writes it", () => {
    const batch = new EntryBatchBuilder()
      .add(text("user-1"), text("hello"), 1_700_000_000_000)
      .add(null, text("bye"))
      .build();
    expect(example("produce-request")).toBe(
      Buffer.from(encodeProduceRequest(42, { topic: "orders", batch })).toString("hex"),
    );
  });

  it("shows the produce response example exactly as the encoder writes it", () => {
    const spans = [
      { partition: 2, baseOffset: 17, count: 1 },
      { partition: 0, baseOffset: 5, count: 1 },
    ];
    expect(example("produce-response")).toBe(
      Buffer.from(encodeProduceResponse(42, { spans })).toString("hex"),
    );
  });

  it("shows the error response example exactly as the encoder writes it", () => {
    const frame = encodeErrorResponse(
      42,
      Errors.topicNotFound,
      'Cannot produce: no topic "orders"',
    );
    expect(example("error-response")).toBe(Buffer.from(frame).toString("hex"));
  });
});
