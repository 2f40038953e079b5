import { timingSafeEqual } from "node:crypto";
import type { IncomingHttpHeaders } from "node:http";
import { DEFAULT_TEAM_ID, type TeamCatalog } from "../catalog/index.js";
import { presentedApiKey } from "../shared/api-key-auth.js";
import { type Logger, WarrenError } from "../shared/index.js";
import { hashApiKey } from "./keys.js";

/** Who a request is from, once authenticated. */
export interface Caller {
  /**
   * The team it acts for. Undefined only for the admin without `X-Team-ID`: its view spans
   * every team (lists show all; a create goes to the default team).
   */
  readonly teamId: string | undefined;
  /** Presented the admin token: may use node-wide routes and act for any team. */
  readonly admin: boolean;
}

export const ADMIN_TOKEN_HEADER = "x-admin-token";
export const TEAM_ID_HEADER = "x-team-id";

export interface AuthenticatorOptions {
  readonly adminToken: string;
  /** The default team's keys from the key file and WARREN_API_KEYS, read on every request. */
  readonly fileKeys: () => ReadonlySet<string>;
  /** The team catalog; undefined while the node is still opening it. */
  readonly teams: () => TeamCatalog | undefined;
  readonly logger?: Logger;
}

/** How often a key's `lastUsed` is written at most: a busy key must not mean a write per request. */
const LAST_USED_EVERY_MS = 60_000;

/**
 * Turns a request's headers into its `Caller`, or throws 401. Team keys are looked up by
 * hash on every request, so a key deleted through any node or gateway is refused from the
 * next request on; nothing is cached.
 */
export class Authenticator {
  readonly #o: AuthenticatorOptions;
  readonly #adminDigest: Buffer;
  readonly #stamped = new Map<string, number>();

  constructor(options: AuthenticatorOptions) {
    this.#o = options;
    this.#adminDigest = Buffer.from(hashApiKey(options.adminToken), "hex");
  }

  async authenticate(headers: IncomingHttpHeaders): Promise<Caller> {
    const adminToken = headers[ADMIN_TOKEN_HEADER];
    if (typeof adminToken === "string" && adminToken !== "")
      return this.#admin(adminToken, headers);
    const key = presentedApiKey(headers);
    if (key === undefined) {
      throw new WarrenError(
        "unauthenticated",
        "missing API key: send it in the X-API-Key header (or the admin token in X-Admin-Token)",
      );
    }
    const hash = hashApiKey(key);
    for (const fileKey of this.#o.fileKeys()) {
      if (sameDigest(hash, hashApiKey(fileKey))) return { teamId: DEFAULT_TEAM_ID, admin: false };
    }
    const row = await this.#teams().findApiKeyByHash(hash);
    if (row === undefined) throw new WarrenError("unauthenticated", "invalid API key");
    this.#stamp(row.teamId, row.id);
    return { teamId: row.teamId, admin: false };
  }

  /**
   * The admin alone: `X-Admin-Token`, or `Authorization: Bearer <admin token>` (what a
   * Prometheus scrape config sends). 401 without credentials, 403 for a team's key.
   */
  async authenticateAdmin(headers: IncomingHttpHeaders): Promise<Caller> {
    const bearer = presentedApiKey({ authorization: headers.authorization });
    if (typeof headers[ADMIN_TOKEN_HEADER] !== "string" && bearer !== undefined) {
      if (sameDigest(hashApiKey(bearer), this.#adminDigest.toString("hex"))) {
        return { teamId: undefined, admin: true };
      }
    }
    const caller = await this.authenticate(headers);
    requireAdmin(caller, "this route");
    return caller;
  }

  async #admin(token: string, headers: IncomingHttpHeaders): Promise<Caller> {
    if (!sameDigest(hashApiKey(token), this.#adminDigest.toString("hex"))) {
      throw new WarrenError("unauthenticated", "invalid admin token");
    }
    const teamId = headers[TEAM_ID_HEADER];
    if (typeof teamId !== "string" || teamId === "") return { teamId: undefined, admin: true };
    if (!(await this.#teams().getTeam(teamId))) {
      throw new WarrenError("team_not_found", `no team has the id '${teamId}' (X-Team-ID)`);
    }
    return { teamId, admin: true };
  }

  #teams(): TeamCatalog {
    const teams = this.#o.teams();
    if (!teams) throw new WarrenError("not_ready", "the server is starting: retry shortly");
    return teams;
  }

  /** Records the key's use, at most once a minute, without holding the request up. */
  #stamp(teamId: string, keyId: string): void {
    const now = Date.now();
    if (now - (this.#stamped.get(keyId) ?? 0) < LAST_USED_EVERY_MS) return;
    this.#stamped.set(keyId, now);
    if (this.#stamped.size > 10_000) this.#stamped.clear();
    this.#teams()
      .updateApiKey(teamId, keyId, { lastUsedAt: new Date(now).toISOString() })
      .catch((err: unknown) => this.#o.logger?.warn({ err }, "api_keys.last_used_failed"));
  }
}

/** Compares hex digests in constant time: the time taken says nothing about the keys. */
function sameDigest(a: string, b: string): boolean {
  return timingSafeEqual(Buffer.from(a, "hex"), Buffer.from(b, "hex"));
}

/** The team a caller's new things belong to: its own, or for the admin's all-teams view, the default team. */
export function actingTeam(caller: Caller): string {
  return caller.teamId ?? DEFAULT_TEAM_ID;
}

/** Throws 403 `admin_required` unless the caller presented the admin token. */
export function requireAdmin(caller: Caller, what: string): void {
  if (!caller.admin) {
    throw new WarrenError(
      "admin_required",
      `${what} needs the admin token (X-Admin-Token); a team's API key cannot use it`,
    );
  }
}
