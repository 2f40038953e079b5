import type { SandboxRow } from "../../catalog/index.js";
import type { ListFilter } from "../types.js";
import { configOf, publicState } from "./live-sandbox.js";

export function matchesFilter(row: SandboxRow, filter: ListFilter): boolean {
  const state = publicState(row);
  if (!state || configOf(row).internal) return false;
  if (filter.teamId !== undefined && row.teamId !== filter.teamId) return false;
  if (filter.states && !filter.states.includes(state)) return false;
  if (filter.template && row.templateId !== filter.template && row.alias !== filter.template) {
    return false;
  }
  // Inclusive: E2B lists a sandbox started at exactly that instant (its JS suite relies on it).
  if (filter.startedAfter && new Date(row.startedAt) < filter.startedAfter) return false;
  return Object.entries(filter.metadata ?? {}).every(([key, value]) => row.metadata[key] === value);
}

/** Oldest first; ties broken by id, so pages never skip or repeat a sandbox. */
export function byStart(a: SandboxRow, b: SandboxRow): number {
  if (a.startedAt !== b.startedAt) return a.startedAt < b.startedAt ? -1 : 1;
  return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
}
