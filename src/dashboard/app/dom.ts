/** A DOM element with attributes and children; text children are text nodes (never HTML). */
export function el(
  tag: string,
  attributes: Record<string, string>,
  children: readonly (Node | string)[],
): HTMLElement {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== "" || name === "hidden") node.setAttribute(name, value);
  }
  node.append(...children);
  return node;
}

/** A table with these column headings over `body` (its rows). */
export function table(headings: readonly string[], body: HTMLElement): HTMLElement {
  return el("table", {}, [
    el("thead", {}, [
      el(
        "tr",
        {},
        headings.map((h) => el("th", {}, [h])),
      ),
    ]),
    body,
  ]);
}

/** An id from the URL, reduced to the characters ids have. */
export function idFromUrl(text: string): string {
  return text.replace(/[^a-z0-9]/g, "");
}

/** How long ago: 42s, 5m, 3h, 2d. */
export function since(iso: string): string {
  const s = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86_400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86_400)}d`;
}
