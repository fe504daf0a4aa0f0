/**
 * The console's only way to make DOM: elements from a tag, properties and children, where every
 * string child becomes a text node. Nothing here (or anywhere in the console) parses markup —
 * no `innerHTML`, no `insertAdjacentHTML`, no `document.write` — so bytes from a record, a topic
 * or a group name are always shown as text, never run (docs/console.md "Security").
 */

/** What an element may contain: nodes, text, nothing, or lists of those. */
export type Child = Node | string | number | null | undefined | false | Child[];

/** Properties of {@link h}: a class, attributes, event listeners. */
export interface Props {
  class?: string;
  /** Attributes set with `setAttribute` (names starting with "on" are refused: use `on`). */
  attrs?: Record<string, string>;
  on?: Partial<Record<keyof HTMLElementEventMap, (event: Event) => void>>;
}

function append(parent: Node, child: Child): void {
  if (child === null || child === undefined || child === false) return;
  if (Array.isArray(child)) {
    for (const c of child) append(parent, c);
    return;
  }
  parent.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
}

/** A new `<tag>` with `props` and `children` (strings become text nodes). */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  props: Props = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  if (props.class !== undefined) el.className = props.class;
  for (const [name, value] of Object.entries(props.attrs ?? {})) {
    if (/^on/i.test(name)) throw new Error(`attribute ${name} is not allowed: use props.on`);
    if (name === "href" && !value.startsWith("#") && !value.startsWith("/"))
      throw new Error("links stay inside the console");
    el.setAttribute(name, value);
  }
  for (const [type, listener] of Object.entries(props.on ?? {}))
    el.addEventListener(type, listener as EventListener);
  append(el, children);
  return el;
}

/** Replaces `parent`'s children with `children`. */
export function replace(parent: Element, ...children: Child[]): void {
  parent.replaceChildren();
  append(parent, children);
}

/** A table with a header row and one row per entry of `rows`. */
export function table(headers: string[], rows: Child[][], caption?: string): HTMLTableElement {
  return h(
    "table",
    {},
    caption === undefined ? null : h("caption", {}, caption),
    h(
      "thead",
      {},
      h(
        "tr",
        {},
        headers.map((x) => h("th", { attrs: { scope: "col" } }, x)),
      ),
    ),
    h(
      "tbody",
      {},
      rows.length === 0
        ? h(
            "tr",
            {},
            h("td", { attrs: { colspan: String(headers.length) }, class: "empty" }, "none"),
          )
        : rows.map((cells) =>
            h(
              "tr",
              {},
              cells.map((c) => h("td", {}, c)),
            ),
          ),
    ),
  );
}

/** Bytes as text with a binary unit (1.5 KiB). */
export function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${unit === 0 ? value : value.toFixed(1)} ${units[unit]}`;
}

/** A rate as text (records/s). */
export function formatRate(perSecond: number | null): string {
  if (perSecond === null) return "…";
  return `${perSecond < 10 ? perSecond.toFixed(1) : Math.round(perSecond)}/s`;
}

/**
 * A link to another broker's console (cluster mode): `url` must be http(s); it opens without
 * a referrer or a handle on this page. @throws Error for any other scheme.
 */
export function externalLink(url: string, text: string): HTMLAnchorElement {
  const protocol = new URL(url).protocol;
  if (protocol !== "http:" && protocol !== "https:")
    throw new Error("links to other brokers are http(s) only");
  const a = document.createElement("a");
  a.setAttribute("href", url);
  a.setAttribute("rel", "noopener noreferrer");
  a.textContent = text;
  return a;
}
