import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { ConnectionOpts } from "e2b";
import { ApiError, CliError } from "./errors.js";

/**
 * What the CLI shows the server: a team's API key (`X-API-Key`: that team only) or the
 * node's admin token (`X-Admin-Token`: every team, the node's own routes, teams and keys).
 * `source` says where it came from, for error messages.
 */
export interface Credential {
  readonly kind: "apiKey" | "adminToken";
  readonly value: string;
  readonly source: string;
}

/** Where the server is and the credential it wants, as resolved for this invocation. */
export interface Connection {
  readonly url: string;
  readonly credential: Credential;
  /** With the admin token: the team it acts as (`X-Team-ID`). */
  readonly teamID?: string;
}

export interface ConnectionFlags {
  readonly url?: string;
  readonly apiKey?: string;
  readonly adminToken?: string;
}

/** `any`: a team key or the admin token; `admin`: the admin token only (teams, other teams' keys). */
export type CredentialNeed = "any" | "admin";

const DEFAULT_HOME = "/var/lib/warren";

/**
 * The server and credential. The server: `--url`, else WARREN_URL, else this host's server
 * (WARREN_HOST/WARREN_PORT, default 127.0.0.1:3000). The credential, first found:
 * `--api-key`, `--admin-token`, WARREN_API_KEY, WARREN_ADMIN_TOKEN, then on the node itself
 * (as root) its data dir's `secrets/admin-token` (the operator sees every team and the node),
 * then `secrets/api-key` (the default team's key). `admin` takes the admin token's sources only.
 */
export function resolveConnection(
  flags: ConnectionFlags,
  need: CredentialNeed = "any",
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
  return { url, credential: resolveCredential(flags, need, env) };
}

function resolveCredential(
  flags: ConnectionFlags,
  need: CredentialNeed,
  env: NodeJS.ProcessEnv,
): Credential {
  const secrets = join(env.WARREN_HOME || DEFAULT_HOME, "secrets");
  const adminFile = join(secrets, "admin-token");
  const keyFile = join(secrets, "api-key");
  const given = (kind: Credential["kind"], value: string | undefined, source: string) => {
    const trimmed = value?.trim();
    return trimmed ? { kind, value: trimmed, source } : undefined;
  };
  const adminFlag = () => given("adminToken", flags.adminToken, "--admin-token");
  const adminEnv = () => given("adminToken", env.WARREN_ADMIN_TOKEN, "WARREN_ADMIN_TOKEN");
  const looked: string[] = [];
  const local = (kind: Credential["kind"], path: string) => () => {
    const read = readSecret(path);
    if ("missing" in read) {
      looked.push(`${path}: ${read.missing}`);
      return undefined;
    }
    return { kind, value: read.value, source: path };
  };
  const sources =
    need === "admin"
      ? [adminFlag, adminEnv, local("adminToken", adminFile)]
      : [
          () => given("apiKey", flags.apiKey, "--api-key"),
          adminFlag,
          () => given("apiKey", env.WARREN_API_KEY, "WARREN_API_KEY"),
          adminEnv,
          local("adminToken", adminFile),
          local("apiKey", keyFile),
        ];
  for (const source of sources) {
    const credential = source();
    if (credential) return credential;
  }
  const where = `run on the node as root (${looked.join("; ")})`;
  throw new CliError(
    need === "admin"
      ? `no admin token (an API key will not do): pass --admin-token, set WARREN_ADMIN_TOKEN, or ${where}`
      : `no API key or admin token: pass --api-key or --admin-token, set WARREN_API_KEY or WARREN_ADMIN_TOKEN, or ${where}`,
    2,
  );
}

/** A secret file's first line, or why there is none (said in the error that lists where we looked). */
function readSecret(path: string): { value: string } | { missing: string } {
  try {
    const value = readFileSync(path, "utf8").split("\n")[0]?.trim();
    return value ? { value } : { missing: "empty" };
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return { missing: "not found" };
    if (code === "EACCES" || code === "EPERM") return { missing: "not readable (root only)" };
    return { missing: code ?? String(err) };
  }
}

/** The connection acting as one team: the admin token with `X-Team-ID`. */
export function asTeam(connection: Connection, teamID: string): Connection {
  return { ...connection, teamID };
}

/** The headers that present the credential (and, for the admin, the team it acts as). */
export function authHeaders(connection: Connection): Record<string, string> {
  const { kind, value } = connection.credential;
  if (kind === "apiKey") return { "x-api-key": value };
  return {
    "x-admin-token": value,
    ...(connection.teamID !== undefined && { "x-team-id": connection.teamID }),
  };
}

/**
 * The e2b SDK's options for the connection (bound to an `E2B` client, so no environment
 * variable of the caller's, such as E2B_DOMAIN or E2B_DEBUG, points it elsewhere). The SDK
 * insists on an API key and sends it as `X-API-KEY`; with the admin token that header is
 * dropped (a null header is removed by its HTTP client) and `X-Admin-Token` sent instead,
 * so the server never reads the token as a key.
 */
export function sdkOptions(connection: Connection): ConnectionOpts {
  const base = {
    apiUrl: connection.url,
    sandboxUrl: connection.url,
    apiKey: connection.credential.value,
    debug: false,
  };
  if (connection.credential.kind === "apiKey") return base;
  const dropped: Record<string, string | null> = { "X-API-KEY": null };
  return {
    ...base,
    apiHeaders: { ...(dropped as Record<string, string>), ...authHeaders(connection) },
  };
}

/** A call of Warren's API the SDK has no method for; an error answer is an ApiError. */
export async function api<T>(
  connection: Connection,
  method: string,
  path: string,
  body?: unknown,
): Promise<T> {
  const res = await fetch(`${connection.url}${path}`, {
    method,
    headers: {
      ...authHeaders(connection),
      ...(body !== undefined && { "content-type": "application/json" }),
    },
    ...(body !== undefined && { body: JSON.stringify(body) }),
  });
  const text = await res.text();
  if (!res.ok) {
    let message = text;
    let reason: string | undefined;
    try {
      const answer = JSON.parse(text) as { message?: string; reason?: string };
      message = answer.message ?? text;
      reason = answer.reason;
    } catch {
      // not JSON: the text is the message
    }
    const refused =
      res.status === 401
        ? ` (the ${connection.credential.kind === "apiKey" ? "API key" : "admin token"} from ${connection.credential.source})`
        : "";
    throw new ApiError(
      `${method} ${path.split("?")[0]}: ${res.status} ${message}${refused}`,
      res.status,
      message,
      reason,
    );
  }
  return (text === "" ? undefined : JSON.parse(text)) as T;
}
