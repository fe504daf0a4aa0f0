/** `--mirror-rename` rules (docs/edge.md "Topic names upstream"): parsing and the names they give. */
import { describe, expect, it } from "vitest";
import { parseMirrorRenames, upstreamTopicName } from "../../src/mirror/mirror.ts";

describe("--mirror-rename", () => {
  it("maps exact names and one-* patterns, first matching rule first, others unchanged", () => {
    const rules = parseMirrorRenames([
      "alarms=site17.alarms",
      "sensors.*=site17.sensors.*",
      "sensors*=all-sensors*",
      "*-raw=raw.*",
    ]);
    expect(upstreamTopicName(rules, "alarms")).toBe("site17.alarms");
    expect(upstreamTopicName(rules, "sensors.temp")).toBe("site17.sensors.temp");
    expect(upstreamTopicName(rules, "sensors.")).toBe("site17.sensors.");
    expect(upstreamTopicName(rules, "sensors")).toBe("all-sensors");
    expect(upstreamTopicName(rules, "sensorsX")).toBe("all-sensorsX");
    expect(upstreamTopicName(rules, "cam-raw")).toBe("raw.cam");
    expect(upstreamTopicName(rules, "alarms2")).toBe("alarms2");
    expect(upstreamTopicName([], "anything")).toBe("anything");
  });

  it("refuses rules that are not two names or two one-* patterns, naming the rule", () => {
    for (const [spec, why] of [
      ["sensors", /must be LOCAL=REMOTE/],
      ["=x", /must be LOCAL=REMOTE/],
      ["x=", /must be LOCAL=REMOTE/],
      ["a*=b", /one \* on each side/],
      ["a*b*=c*d*", /one \* on each side/],
      ["a=b c", /only letters, digits/],
      ["a/b=c", /only letters, digits/],
      [`a=${"x".repeat(250)}`, /1 to 249 characters/],
    ] as const)
      expect(() => parseMirrorRenames([spec]), spec).toThrow(
        new RegExp(`--mirror-rename ${JSON.stringify(spec).replace(/[*]/g, "\\*")}.*${why.source}`),
      );
  });

  it("refuses a name a pattern makes too long when it is used", () => {
    const rules = parseMirrorRenames([`t*=${"p".repeat(200)}*`]);
    expect(upstreamTopicName(rules, `t${"x".repeat(40)}`)).toHaveLength(240);
    expect(() => upstreamTopicName(rules, `t${"x".repeat(60)}`)).toThrow(/1 to 249 characters/);
  });
});
