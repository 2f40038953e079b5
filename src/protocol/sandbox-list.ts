/**
 * The order and cursor of E2B's `GET /v2/sandboxes`, shared by the node's API and the
 * gateway that merges several nodes' pages. Sandboxes are ordered by startedAt, then sandbox
 * id (desc reverses both). A token names the last sandbox a page returned, as
 * base64url(`<startedAt ISO>__<sandboxID>__<order>`) (infra's format plus the order): the
 * position is a key, not an index, so any node can continue a walk another began.
 */
export type ListOrder = "asc" | "desc";

export interface ListPosition {
  readonly startedAt: Date;
  readonly sandboxId: string;
}

export const LIST_TOKEN_SEPARATOR = "__";

export function encodeNextToken(position: ListPosition, order: ListOrder): string {
  const raw = [position.startedAt.toISOString(), position.sandboxId, order].join(
    LIST_TOKEN_SEPARATOR,
  );
  return Buffer.from(raw, "utf8").toString("base64url");
}

/** Ascending by startedAt, then sandbox id (code-unit order, as infra compares strings). */
export function compareAscending(a: ListPosition, b: ListPosition): number {
  const byTime = a.startedAt.getTime() - b.startedAt.getTime();
  if (byTime !== 0) return byTime;
  return a.sandboxId < b.sandboxId ? -1 : a.sandboxId > b.sandboxId ? 1 : 0;
}
