import { WarrenError } from "../shared/index.js";
import type { LifecycleEventQuery } from "./catalog.js";

/** Every catalog's check of a lifecycle listing's paging (the API bounds it further). */
export function checkLifecycleQuery(query: LifecycleEventQuery): void {
  for (const [name, value] of [
    ["offset", query.offset],
    ["limit", query.limit],
  ] as const) {
    if (!(Number.isSafeInteger(value) && value >= 0)) {
      throw new WarrenError("invalid_argument", `${name} must be an integer >= 0, got ${value}`);
    }
  }
}

/** The type filter as the queries take it: null for every type. */
export function typesFilter(query: LifecycleEventQuery): readonly string[] | null {
  return query.types && query.types.length > 0 ? query.types : null;
}
