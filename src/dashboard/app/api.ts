import type { TeamView } from "../../protocol/teams-view.js";
/**
 * The node's API, same origin as the dashboard, with what the user signed in with: a team's
 * API key (sent as `X-API-Key`: that team's sandboxes and templates) or the node's admin
 * token (sent as `X-Admin-Token`: every team, the node, the teams).
 */

export interface Credential {
  readonly kind: "key" | "admin";
  readonly secret: string;
}

const SECRET = "warren.apiKey";
const KIND = "warren.credential";

/** What the tab signed in with (kept in its sessionStorage), if anything. */
export function credential(): Credential | undefined {
  const secret = sessionStorage.getItem(SECRET);
  if (!secret) return undefined;
  return { kind: sessionStorage.getItem(KIND) === "admin" ? "admin" : "key", secret };
}

export function setCredential(value: Credential | undefined): void {
  if (value) {
    sessionStorage.setItem(SECRET, value.secret);
    sessionStorage.setItem(KIND, value.kind);
  } else {
    sessionStorage.removeItem(SECRET);
    sessionStorage.removeItem(KIND);
  }
}

function authHeaders(value: Credential | undefined): Record<string, string> {
  if (!value) return {};
  return value.kind === "admin" ? { "x-admin-token": value.secret } : { "x-api-key": value.secret };
}

/**
 * Which credential a secret is: tried as a team's key first, then as the admin token (each
 * is refused with 401 as the other; a server without teams has no admin route, 404).
 * Undefined when the server refuses it both ways.
 */
export async function identify(secret: string): Promise<Credential | undefined> {
  const asKey: Credential = { kind: "key", secret };
  const key = await fetch("/v2/sandboxes?limit=1", { headers: authHeaders(asKey) });
  if (key.ok) return asKey;
  if (key.status !== 401) throw new ApiError(key.status, await messageOf(key));
  const asAdmin: Credential = { kind: "admin", secret };
  const admin = await fetch("/admin/teams", { headers: authHeaders(asAdmin) });
  if (admin.ok) return asAdmin;
  if (admin.status === 401 || admin.status === 404) return undefined;
  throw new ApiError(admin.status, await messageOf(admin));
}

/** An answer the API refused: its status and message. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** The message of an error answer (`{code, message}`), or its text. */
async function messageOf(res: Response): Promise<string> {
  const text = await res.text();
  try {
    return (JSON.parse(text) as { message?: string }).message ?? text;
  } catch {
    return text; // plain text
  }
}

export async function get<T>(path: string): Promise<T> {
  return call<T>("GET", path);
}

export async function call<T>(method: string, path: string, body?: unknown): Promise<T> {
  return (await request<T>(method, path, body)).data;
}

/**
 * Every page of a list route (E2B's `nextToken` / `X-Next-Token`), up to `max` items: a node
 * running thousands of rollouts lists them all, not the first page.
 */
export async function getAll<T>(path: string, max: number): Promise<{ items: T[]; more: boolean }> {
  const items: T[] = [];
  let token: string | null = null;
  do {
    const sep = path.includes("?") ? "&" : "?";
    const page: { data: T[]; next: string | null } = await request<T[]>(
      "GET",
      token ? `${path}${sep}nextToken=${encodeURIComponent(token)}` : path,
    );
    items.push(...page.data);
    token = page.next;
  } while (token && items.length < max);
  return { items, more: token !== null };
}

async function request<T>(
  method: string,
  path: string,
  body?: unknown,
): Promise<{ data: T; next: string | null }> {
  const res = await fetch(path, {
    method,
    headers: {
      ...authHeaders(credential()),
      ...(body !== undefined && { "content-type": "application/json" }),
    },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  if (!res.ok) throw new ApiError(res.status, await messageOf(res));
  const text = await res.text();
  return {
    data: (text ? JSON.parse(text) : undefined) as T,
    next: res.headers.get("x-next-token") || null,
  };
}

export interface ListedSandbox {
  sandboxID: string;
  templateID: string;
  alias?: string;
  state: "running" | "paused";
  startedAt: string;
  endAt: string;
  cpuCount: number;
  memoryMB: number;
  metadata: Record<string, string>;
}

export interface SandboxDetail extends ListedSandbox {
  envdAccessToken?: string;
}

export interface Metric {
  timestampUnix: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
}

export interface LogEntry {
  timestamp: string;
  level: string;
  message: string;
  fields: { source?: string };
}

export interface Lineage {
  sandboxId: string;
  templateId: string;
  parentId?: string;
  via: "fork" | "snapshot" | "template";
  snapshotId?: string;
}

export interface TemplateSummary {
  templateID: string;
  names: string[];
  buildStatus: string;
  buildCount: number;
  cpuCount: number;
  memoryMB: number;
  createdAt: string;
}

export interface TemplateDetail {
  templateID: string;
  names: string[];
  builds: { buildID: string; status: string; createdAt: string; finishedAt?: string }[];
}

export interface BuildStatus {
  status: string;
  logEntries: { timestamp: string; level: string; message: string }[];
}

/** A team's quotas, and a team as `GET /admin/teams` answers (protocol's shapes). */
export type TeamSummary = TeamView;
