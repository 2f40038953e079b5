/**
 * A fake Warren API speaking the teams contract (teams, API keys, the admin token,
 * `X-Team-ID`, `admin_required`), in memory on a loopback port: what the CLI's and the
 * dashboard's own tests run against before, and apart from, the real server. Sandboxes are
 * seeded by the test (nothing runs); every request is recorded with its headers, so a test
 * can say which credential went where. Stricter than the contract in one way: a request
 * presenting both a key and the admin token is refused (400), so a client that sends both
 * is caught.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { NodeView } from "../../src/protocol/index.js";
import { dashboardFiles } from "../../src/server/dashboard-files.js";

export interface FakeLimits {
  maxSandboxes?: number;
  maxVcpus?: number;
  maxMemoryMiB?: number;
  maxDiskGiB?: number;
  maxBuilds?: number;
  maxUploadBytes?: number;
  maxVolumeBytes?: number;
}

export interface FakeTeam {
  teamID: string;
  name: string;
  createdAt: string;
  limits: FakeLimits;
}

export interface FakeKey {
  id: string;
  teamID: string;
  name: string;
  key: string;
  createdAt: string;
  lastUsed: string | null;
}

export interface FakeSandbox {
  sandboxID: string;
  teamID: string;
  templateID: string;
  state: "running" | "paused";
  cpuCount: number;
  memoryMB: number;
  diskSizeMB: number;
  metadata: Record<string, string>;
}

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  readonly headers: IncomingMessage["headers"];
  readonly body: unknown;
}

/** Who a request is: the admin (acting as a team with X-Team-ID) or a team by its key. */
type Caller = { admin: true; teamID?: string } | { admin: false; teamID: string };

class Refusal extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly reason?: string,
  ) {
    super(message);
  }
}

export class FakeTeamsApi {
  readonly adminToken = `admin_${randomBytes(16).toString("hex")}`;
  readonly teams = new Map<string, FakeTeam>();
  readonly keys = new Map<string, FakeKey>();
  readonly sandboxes: FakeSandbox[] = [];
  readonly requests: RecordedRequest[] = [];
  /** The default team's key (the old install's key file). */
  readonly defaultKey: string;
  private server: Server | undefined;
  private readonly dashboard: ReturnType<typeof dashboardFiles> | undefined;

  /** `dashboardDir`: also serve the built dashboard at /dashboard/, as the node does. */
  constructor(options: { dashboardDir?: string } = {}) {
    this.dashboard = options.dashboardDir ? dashboardFiles(options.dashboardDir) : undefined;
    this.addTeam("default", {}, "default");
    this.defaultKey = this.addKey("default", "install").key;
  }

  get url(): string {
    const address = this.server?.address() as AddressInfo | undefined;
    if (!address) throw new Error("the fake teams API is not listening");
    return `http://127.0.0.1:${address.port}`;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    const server = this.server;
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return this;
  }

  async stop(): Promise<void> {
    const server = this.server;
    if (!server) return;
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }

  addTeam(
    name: string,
    limits: FakeLimits = {},
    teamID = `team_${randomBytes(6).toString("hex")}`,
  ) {
    const team: FakeTeam = { teamID, name, createdAt: new Date().toISOString(), limits };
    this.teams.set(teamID, team);
    return team;
  }

  addKey(teamID: string, name: string): FakeKey {
    const key: FakeKey = {
      id: `key_${randomBytes(6).toString("hex")}`,
      teamID,
      name,
      key: `e2b_${randomBytes(20).toString("hex")}`,
      createdAt: new Date().toISOString(),
      lastUsed: null,
    };
    this.keys.set(key.id, key);
    return key;
  }

  addSandbox(teamID: string, shape: Partial<FakeSandbox> = {}): FakeSandbox {
    const sandbox: FakeSandbox = {
      sandboxID: `sb${randomBytes(6).toString("hex")}`,
      teamID,
      templateID: "base",
      state: "running",
      cpuCount: 2,
      memoryMB: 512,
      diskSizeMB: 1024,
      metadata: {},
      ...shape,
    };
    this.sandboxes.push(sandbox);
    return sandbox;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? "/", "http://fake");
    if (this.dashboard?.matches(req)) return this.dashboard.serve(req, res);
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString();
    let body: unknown;
    try {
      body = text ? JSON.parse(text) : undefined;
    } catch {
      body = text;
    }
    this.requests.push({
      method: req.method ?? "",
      path: url.pathname,
      headers: req.headers,
      body,
    });
    try {
      const answer = this.route(req.method ?? "GET", url, this.caller(req), body);
      if (answer === undefined) {
        res.writeHead(204).end();
      } else {
        res.writeHead(answer.status, { "content-type": "application/json" });
        res.end(JSON.stringify(answer.body));
      }
    } catch (err) {
      const refusal = err instanceof Refusal ? err : new Refusal(500, String(err));
      res.writeHead(refusal.status, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          code: refusal.status,
          message: refusal.message,
          ...(refusal.reason && { reason: refusal.reason }),
        }),
      );
    }
  }

  private caller(req: IncomingMessage): Caller {
    const admin = header(req, "x-admin-token");
    const bearer = /^Bearer\s+(\S+)$/i.exec(header(req, "authorization") ?? "")?.[1];
    const key = header(req, "x-api-key") ?? bearer;
    if (admin !== undefined && key !== undefined)
      throw new Refusal(400, "send an API key or the admin token, not both");
    if (admin !== undefined) {
      if (admin !== this.adminToken) throw new Refusal(401, "invalid admin token");
      const teamID = header(req, "x-team-id");
      if (teamID !== undefined && !this.teams.has(teamID))
        throw new Refusal(404, `team ${teamID} not found`);
      return teamID === undefined ? { admin: true } : { admin: true, teamID };
    }
    if (key === undefined)
      throw new Refusal(401, "missing API key: send it in the X-API-Key header");
    const found = [...this.keys.values()].find((k) => k.key === key);
    if (!found) throw new Refusal(401, "invalid API key");
    found.lastUsed = new Date().toISOString();
    return { admin: false, teamID: found.teamID };
  }

  private route(
    method: string,
    url: URL,
    caller: Caller,
    body: unknown,
  ): { status: number; body: unknown } | undefined {
    const parts = url.pathname.split("/").filter(Boolean).map(decodeURIComponent);
    const pattern = PATTERNS.find(
      (p) =>
        p.length === parts.length &&
        p.every((segment, i) => segment === ":" || segment === parts[i]),
    );
    const route = `${method} /${(pattern ?? parts).join("/")}`;
    const ok = (value: unknown, status = 200) => ({ status, body: value });
    if (parts[0] === "admin" || route === "GET /node") {
      if (!caller.admin) throw new Refusal(403, "this needs the admin token", "admin_required");
    }
    switch (route) {
      case "GET /admin/teams":
        return ok([...this.teams.values()].map((t) => this.summary(t)));
      case "POST /admin/teams": {
        const { name, limits } = body as { name?: string; limits?: FakeLimits };
        if (!name) throw new Refusal(400, "a team needs a name");
        const team = this.addTeam(name, limits ?? {});
        const key = this.addKey(team.teamID, "first");
        return ok({ ...team, apiKey: key.key, apiKeyID: key.id }, 201);
      }
      case "DELETE /admin/teams/:": {
        const team = this.team(parts[2]);
        if (team.teamID === "default") throw new Refusal(400, "the default team stays");
        const live = this.sandboxes.filter((s) => s.teamID === team.teamID);
        if (live.length > 0 && url.searchParams.get("force") !== "true") {
          throw new Refusal(
            409,
            `team ${team.teamID} has ${live.length} running or paused sandboxes`,
            "conflict",
          );
        }
        this.removeTeam(team.teamID);
        return undefined;
      }
      case "POST /admin/teams/:/api-keys": {
        const team = this.team(parts[2]);
        return ok(this.shown(this.addKey(team.teamID, nameOf(body)), true), 201);
      }
      case "DELETE /admin/teams/:/api-keys/:": {
        const team = this.team(parts[2]);
        this.removeKey(team.teamID, parts[4]);
        return undefined;
      }
      case "GET /api-keys":
        return ok(
          [...this.keys.values()]
            .filter((k) => k.teamID === this.actingTeam(caller))
            .map((k) => this.shown(k, false)),
        );
      case "POST /api-keys":
        return ok(this.shown(this.addKey(this.actingTeam(caller), nameOf(body)), true), 201);
      case "DELETE /api-keys/:":
        this.removeKey(this.actingTeam(caller), parts[1]);
        return undefined;
      case "GET /node":
        return ok(this.nodeView());
      case "GET /v2/sandboxes": {
        const states = (url.searchParams.get("state") ?? "running,paused").split(",");
        return ok(
          this.visible(caller)
            .filter((s) => states.includes(s.state))
            .map((s) => listed(s)),
        );
      }
      case "GET /sandboxes/:": {
        const sandbox = this.visible(caller).find((s) => s.sandboxID === parts[1]);
        if (!sandbox) throw new Refusal(404, `sandbox ${parts[1]} not found`);
        return ok(listed(sandbox));
      }
      case "GET /templates":
        return ok([]);
      case "GET /lineage":
        return ok(
          this.visible(caller).map((s) => ({
            sandboxId: s.sandboxID,
            templateId: s.templateID,
            via: "template",
          })),
        );
      default:
        throw new Refusal(404, `the fake has no route ${method} ${url.pathname}`);
    }
  }

  /** The team a caller's key routes act on: its key's, or the admin's X-Team-ID. */
  private actingTeam(caller: Caller): string {
    if (caller.teamID === undefined)
      throw new Refusal(400, "as the admin, name the team: X-Team-ID");
    return caller.teamID;
  }

  private visible(caller: Caller): FakeSandbox[] {
    return this.sandboxes.filter(
      (s) => (caller.admin && caller.teamID === undefined) || s.teamID === caller.teamID,
    );
  }

  private team(teamID: string | undefined): FakeTeam {
    const team = teamID === undefined ? undefined : this.teams.get(teamID);
    if (!team) throw new Refusal(404, `team ${teamID} not found`);
    return team;
  }

  private removeTeam(teamID: string): void {
    this.teams.delete(teamID);
    for (const [id, key] of this.keys) if (key.teamID === teamID) this.keys.delete(id);
    for (let i = this.sandboxes.length - 1; i >= 0; i--) {
      if (this.sandboxes[i]?.teamID === teamID) this.sandboxes.splice(i, 1);
    }
  }

  private removeKey(teamID: string, keyID: string | undefined): void {
    const key = keyID === undefined ? undefined : this.keys.get(keyID);
    if (!key || key.teamID !== teamID) throw new Refusal(404, `API key ${keyID} not found`);
    this.keys.delete(key.id);
  }

  private summary(team: FakeTeam) {
    const own = this.sandboxes.filter((s) => s.teamID === team.teamID);
    const sum = (f: (s: FakeSandbox) => number) => own.reduce((n, s) => n + f(s), 0);
    return {
      ...team,
      usage: {
        sandboxes: own.length,
        vcpus: sum((s) => s.cpuCount),
        memoryMiB: sum((s) => s.memoryMB),
        diskMiB: sum((s) => s.diskSizeMB),
      },
    };
  }

  /** E2B's TeamAPIKey (and, when created, CreatedTeamAPIKey with the key). */
  private shown(key: FakeKey, withKey: boolean) {
    return {
      id: key.id,
      name: key.name,
      mask: {
        prefix: "e2b_",
        valueLength: key.key.length - 4,
        maskedValuePrefix: key.key.slice(4, 6),
        maskedValueSuffix: key.key.slice(-4),
      },
      createdAt: key.createdAt,
      createdBy: null,
      lastUsed: key.lastUsed,
      ...(withKey && { key: key.key }),
    };
  }

  private nodeView(): NodeView {
    const running = this.sandboxes.filter((s) => s.state === "running");
    return {
      status: "healthy",
      accelerator: "kvm",
      sandboxesByState: {
        running: running.length,
        paused: this.sandboxes.length - running.length,
      },
      pool: { ready: 1, memoryMiB: 512, templates: 1 },
      sandboxes: running.map((s) => ({ sandboxId: s.sandboxID, templateId: s.templateID })),
      capacity: {
        maxSandboxes: 64,
        maxVcpus: 32,
        maxMemoryMiB: 65536,
        sandboxes: running.length,
        vcpus: running.reduce((n, s) => n + s.cpuCount, 0),
        memoryMiB: running.reduce((n, s) => n + s.memoryMB, 0),
      },
    };
  }
}

/** The routes' paths, `:` standing for an id. */
const PATTERNS = [
  "admin/teams",
  "admin/teams/:",
  "admin/teams/:/api-keys",
  "admin/teams/:/api-keys/:",
  "api-keys",
  "api-keys/:",
  "node",
  "v2/sandboxes",
  "sandboxes/:",
  "templates",
  "lineage",
].map((p) => p.split("/"));

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return typeof value === "string" && value !== "" ? value : undefined;
}

function nameOf(body: unknown): string {
  const name = (body as { name?: unknown } | undefined)?.name;
  if (typeof name !== "string" || name === "") throw new Refusal(400, "a key needs a name");
  return name;
}

/** E2B's ListedSandbox (what the SDK's list and getInfo parse). */
function listed(s: FakeSandbox) {
  const started = new Date(Date.now() - 60_000);
  return {
    sandboxID: s.sandboxID,
    templateID: s.templateID,
    alias: s.templateID,
    clientID: "fake",
    startedAt: started.toISOString(),
    endAt: new Date(started.getTime() + 3_600_000).toISOString(),
    cpuCount: s.cpuCount,
    memoryMB: s.memoryMB,
    diskSizeMB: s.diskSizeMB,
    metadata: s.metadata,
    state: s.state,
    envdVersion: "0.2.0",
  };
}
