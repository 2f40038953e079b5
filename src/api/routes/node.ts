import type { FastifyInstance } from "fastify";
import type { NodeView } from "../../protocol/index.js";
import { requireAdmin } from "../../tenancy/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";

/**
 * Warren's own routes, beyond E2B's (the dashboard reads them): `GET /node`, what the node
 * holds (sandboxes by state, warm pools, capacity, each running sandbox's latest sample),
 * the admin's only; `GET /lineage`, where each running or paused sandbox came from (fork
 * trees): a team sees its own sandboxes', the admin every team's.
 */
export function registerNodeRoutes(
  app: FastifyInstance,
  { service, status: nodeStatus }: ApiContext,
): void {
  app.get("/node", async (request): Promise<NodeView> => {
    requireAdmin(callerOf(request), "GET /node (the whole node)");
    const status = nodeStatus();
    return { status: status.phase, accelerator: status.accelerator ?? null, ...service().stats() };
  });
  app.get("/lineage", async (request) => {
    const { teamId } = callerOf(request);
    const lineage = await service().lineage();
    if (teamId === undefined) return lineage;
    const own = new Set(
      service()
        .list({ teamId })
        .map((info) => info.sandboxId),
    );
    return lineage.filter((entry) => own.has(entry.sandboxId));
  });
}
