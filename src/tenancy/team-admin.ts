import { randomUUID } from "node:crypto";
import {
  type ApiKeyRow,
  DEFAULT_TEAM_ID,
  type TeamCatalog,
  type TeamLimits,
  type TeamRow,
} from "../catalog/index.js";
import { WarrenError } from "../shared/index.js";
import { newApiKey } from "./keys.js";

/** What removing a team needs of the sandboxes it holds (the node's orchestrator, or a gateway). */
export interface TeamSandboxes {
  /** Its running and paused sandboxes. */
  count(teamId: string): Promise<number>;
  killAll(teamId: string): Promise<void>;
}

const MAX_NAME = 64;

function checkName(name: unknown, field: string): string {
  if (typeof name !== "string" || name.trim() === "" || name.length > MAX_NAME) {
    throw new WarrenError("invalid_argument", `${field} must be 1-${MAX_NAME} characters`);
  }
  return name.trim();
}

/** Teams and their keys, as the admin and the teams themselves change them. */
export class TeamAdmin {
  constructor(
    readonly teams: TeamCatalog,
    readonly sandboxes: TeamSandboxes,
  ) {}

  /** A new team and its first key (shown once). */
  async createTeam(
    name: unknown,
    limits: TeamLimits,
  ): Promise<{ team: TeamRow; key: string; keyRow: ApiKeyRow }> {
    const team: TeamRow = {
      id: randomUUID(),
      name: checkName(name, "name"),
      createdAt: new Date().toISOString(),
      limits,
    };
    await this.teams.putTeam(team);
    const { row, key } = newApiKey(team.id, "default");
    await this.teams.insertApiKey(row);
    return { team, key, keyRow: row };
  }

  async team(id: string): Promise<TeamRow> {
    const team = await this.teams.getTeam(id);
    if (!team) throw new WarrenError("team_not_found", `no team has the id '${id}'`);
    return team;
  }

  async updateTeam(id: string, patch: { name?: unknown; limits?: TeamLimits }): Promise<TeamRow> {
    const team = await this.team(id);
    const next: TeamRow = {
      ...team,
      ...(patch.name !== undefined && { name: checkName(patch.name, "name") }),
      ...(patch.limits !== undefined && { limits: patch.limits }),
    };
    await this.teams.putTeam(next);
    return next;
  }

  /**
   * Deletes the team and its keys at once. A team still holding sandboxes is refused unless
   * `force`, which kills them first; the default team (the key file's) cannot go.
   */
  async removeTeam(id: string, force: boolean): Promise<void> {
    if (id === DEFAULT_TEAM_ID) {
      throw new WarrenError("invalid_argument", "the default team cannot be removed");
    }
    await this.team(id);
    const live = await this.sandboxes.count(id);
    if (live > 0 && !force) {
      throw new WarrenError(
        "conflict",
        `team ${id} still has ${live} running or paused sandboxes: kill them, or remove it with force`,
      );
    }
    // Keys first: from here on nothing of the team's can start anything new.
    await this.teams.deleteTeam(id);
    if (live > 0) await this.sandboxes.killAll(id);
  }

  async createKey(teamId: string, name: unknown): Promise<{ row: ApiKeyRow; key: string }> {
    await this.team(teamId);
    const made = newApiKey(teamId, checkName(name ?? "key", "name"));
    await this.teams.insertApiKey(made.row);
    return made;
  }

  listKeys(teamId: string): Promise<ApiKeyRow[]> {
    return this.teams.listApiKeys(teamId);
  }

  async renameKey(teamId: string, keyId: string, name: unknown): Promise<ApiKeyRow> {
    const row = await this.teams.updateApiKey(teamId, keyId, { name: checkName(name, "name") });
    if (!row) throw keyNotFound(keyId);
    return row;
  }

  async deleteKey(teamId: string, keyId: string): Promise<void> {
    if (!(await this.teams.deleteApiKey(teamId, keyId))) throw keyNotFound(keyId);
  }
}

function keyNotFound(keyId: string): WarrenError {
  return new WarrenError("api_key_not_found", `the team has no API key '${keyId}'`);
}
