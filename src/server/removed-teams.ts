import { DEFAULT_TEAM_ID, type TeamCatalog } from "../catalog/index.js";
import type { Orchestrator } from "../orchestrator/index.js";
import type { Logger } from "../shared/index.js";
import type { TeamSandboxes } from "../tenancy/index.js";

/**
 * A team's sandboxes, for removing the team: counted wherever they are (`count`: this node's
 * catalog, or every node's rows in a cluster, so that the refusal without `force` sees them
 * all), killed here. In a cluster the other nodes kill theirs at their next heartbeat
 * (`killRemovedTeams`): nodes do not call each other.
 */
export function teamSandboxes(
  orchestrator: Orchestrator,
  count: (teamId: string) => Promise<number>,
): TeamSandboxes {
  return {
    count,
    async killAll(teamId) {
      await killTeamHere(orchestrator, teamId);
    },
  };
}

/**
 * Kills this node's sandboxes (running or paused) whose team no longer exists: a team
 * removed through another node of the cluster. Returns how many it killed.
 */
export async function killRemovedTeams(
  orchestrator: Orchestrator,
  teams: Pick<TeamCatalog, "getTeam">,
  logger: Logger,
): Promise<number> {
  const held = new Set(orchestrator.list({}).map((sandbox) => sandbox.teamId));
  held.delete(DEFAULT_TEAM_ID); // never removed
  let killed = 0;
  for (const teamId of held) {
    if (await teams.getTeam(teamId)) continue;
    const count = await killTeamHere(orchestrator, teamId);
    logger.info({ teamId, sandboxes: count }, "cluster.removed_team_killed");
    killed += count;
  }
  return killed;
}

async function killTeamHere(orchestrator: Orchestrator, teamId: string): Promise<number> {
  const sandboxes = orchestrator.list({ teamId });
  for (const sandbox of sandboxes) {
    await orchestrator.kill(sandbox.sandboxId).catch((err: unknown) => {
      if ((err as { reason?: string }).reason !== "sandbox_not_found") throw err;
    });
  }
  return sandboxes.length;
}
