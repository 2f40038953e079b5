/** The node's API, same origin as the dashboard, with the key the user logged in with. */

const KEY = "warren.apiKey";

export function apiKey(): string | undefined {
  return sessionStorage.getItem(KEY) ?? undefined;
}

export function setApiKey(key: string | undefined): void {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
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
      "x-api-key": apiKey() ?? "",
      ...(body !== undefined && { "content-type": "application/json" }),
    },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (!res.ok) {
    let message = text;
    try {
      message = (JSON.parse(text) as { message?: string }).message ?? text;
    } catch {
      // plain text
    }
    throw new ApiError(res.status, message);
  }
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
