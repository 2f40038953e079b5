/**
 * Cursor pagination of `GET /v2/sandboxes` (order and token format: protocol's
 * sandbox-list). The next page starts strictly after the token's position, so the walk
 * stays exact when sandboxes pause, resume, appear or go away between pages.
 */
import {
  compareAscending,
  encodeNextToken,
  LIST_TOKEN_SEPARATOR,
  type ListOrder as Order,
  type ListPosition as Position,
} from "../protocol/index.js";
import { invalid } from "./input.js";

export { encodeNextToken, type Order, type Position };

export const DEFAULT_PAGE_LIMIT = 100;
export const MAX_PAGE_LIMIT = 100;

const ID = /^[a-z0-9]+$/;

/** The position a token names; 400 when it is not one of ours or was made for the other order. */
export function decodeNextToken(token: string, order: Order): Position {
  const bad = () => invalid("querystring/nextToken", "is not a valid pagination token");
  if (!/^[A-Za-z0-9_-]+$/.test(token)) throw bad();
  const parts = Buffer.from(token, "base64url").toString("utf8").split(LIST_TOKEN_SEPARATOR);
  if (parts.length !== 3) throw bad();
  const [iso = "", sandboxId = "", tokenOrder] = parts;
  const startedAt = new Date(iso);
  if (Number.isNaN(startedAt.getTime()) || startedAt.toISOString() !== iso) throw bad();
  if (!ID.test(sandboxId)) throw bad();
  if (tokenOrder !== order) {
    throw invalid("querystring/nextToken", `was issued for order=${tokenOrder}, not ${order}`);
  }
  return { startedAt, sandboxId };
}

export interface Page<T> {
  readonly items: T[];
  /** Absent on the last page. */
  readonly nextToken?: string;
}

/** One page of `all` (any order) after `after`, in `order`. */
export function paginate<T extends Position>(
  all: readonly T[],
  options: { order: Order; limit: number; after?: Position },
): Page<T> {
  const { order, limit, after } = options;
  const sign = order === "asc" ? 1 : -1;
  const compare = (a: Position, b: Position) => sign * compareAscending(a, b);
  const sorted = [...all].sort(compare);
  const rest = after === undefined ? sorted : sorted.filter((s) => compare(s, after) > 0);
  const items = rest.slice(0, limit);
  const last = items.at(-1);
  if (rest.length <= limit || last === undefined) return { items };
  return { items, nextToken: encodeNextToken(last, order) };
}
