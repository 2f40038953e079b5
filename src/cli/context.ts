import { readFileSync } from "node:fs";
import { join } from "node:path";
import { CliError } from "./errors.js";

/** Where the server is and the key it wants, as resolved for this invocation. */
export interface Connection {
  readonly url: string;
  readonly apiKey: string;
}

export interface ConnectionFlags {
  readonly url?: string;
  readonly apiKey?: string;
}

const DEFAULT_HOME = "/var/lib/warren";

/**
 * The server and key: flags first, then WARREN_URL / WARREN_API_KEY, then, on the node
 * itself, the local server (WARREN_HOST/WARREN_PORT, default 127.0.0.1:3000) with the key
 * from its data dir (`<WARREN_HOME>/secrets/api-key`, readable by root).
 */
export function resolveConnection(
  flags: ConnectionFlags,
  env: NodeJS.ProcessEnv = process.env,
): Connection {
  const url = (
    flags.url ??
    env.WARREN_URL ??
    `http://${env.WARREN_HOST ?? "127.0.0.1"}:${env.WARREN_PORT ?? "3000"}`
  ).replace(/\/+$/, "");
  if (!/^https?:\/\/[^/\s]+$/.test(url)) {
    throw new CliError(`--url ${url} is not a server URL such as http://127.0.0.1:3000`, 2);
  }
  const apiKey = flags.apiKey ?? env.WARREN_API_KEY ?? localKey(env.WARREN_HOME ?? DEFAULT_HOME);
  if (!apiKey) {
    throw new CliError(
      `no API key: pass --api-key, set WARREN_API_KEY, or run on the node as root (it reads ${join(env.WARREN_HOME ?? DEFAULT_HOME, "secrets", "api-key")})`,
      2,
    );
  }
  return { url, apiKey };
}

function localKey(home: string): string | undefined {
  try {
    return (
      readFileSync(join(home, "secrets", "api-key"), "utf8")
        .split("\n")[0]
        ?.trim() || undefined
    );
  } catch {
    return undefined;
  }
}

/** Points the e2b SDK (which the sandbox commands use) at the connection. */
export function useForSdk(connection: Connection): void {
  process.env.E2B_API_URL = connection.url;
  process.env.E2B_SANDBOX_URL = connection.url;
  process.env.E2B_API_KEY = connection.apiKey;
  delete process.env.E2B_DOMAIN;
  delete process.env.E2B_DEBUG;
}

/** A call of Warren's API the SDK has no method for; an error answer is its message. */
export async function api<T>(
  connection: Connection,
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const res = await fetch(`${connection.url}${path}`, {
    method,
    headers: {
      "x-api-key": connection.apiKey,
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
      // not JSON: the text is the message
    }
    throw new CliError(`${method} ${path.split("?")[0]}: ${res.status} ${message}`);
  }
  return (text === "" ? undefined : JSON.parse(text)) as T;
}
