import type { FastifyInstance } from "fastify";
import type { NodeView } from "../../protocol/index.js";
import type { ApiContext } from "../api-context.js";

/**
 * Warren's own routes, beyond E2B's (the dashboard reads them): `GET /node`, what the node
 * holds (sandboxes by state, warm pools, capacity, each running sandbox's latest sample);
 * `GET /lineage`, where each running or paused sandbox came from (fork trees).
 */
export function registerNodeRoutes(app: FastifyInstance, { service }: ApiContext): void {
  app.get("/node", async (): Promise<NodeView> => {
    const status = service.status();
    return { status: status.phase, accelerator: status.accelerator ?? null, ...service.stats() };
  });
  app.get("/lineage", async () => service.lineage());
}
