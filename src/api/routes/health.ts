import type { IncomingHttpHeaders } from "node:http";
import type { FastifyInstance } from "fastify";
import type { Caller } from "../../tenancy/index.js";
import type { ApiContext } from "../api-context.js";

/**
 * `GET /health`: open (no API key), always 200 while the process answers; `status` says
 * whether the API serves requests yet ("starting" | "ready" | "failed"). That is all a
 * caller learns but the admin: the rest (the accelerator and why, a start failure's message,
 * the warm pools' size) names paths, hosts and configuration of the whole node, and goes to
 * the admin token (and to the log).
 */
export function registerHealthRoutes(
  app: FastifyInstance,
  { status: nodeStatus }: ApiContext,
  authenticate: (headers: IncomingHttpHeaders) => Promise<Caller>,
): void {
  app.get("/health", async (request) => {
    const status = nodeStatus();
    const caller = await authenticate(request.headers).catch(() => undefined);
    if (!caller?.admin) return { status: status.phase };
    return {
      status: status.phase,
      accelerator: status.accelerator ?? null,
      ...(status.acceleratorReason === undefined
        ? {}
        : { acceleratorReason: status.acceleratorReason }),
      ...(status.message === undefined ? {} : { message: status.message }),
      ...(status.pooledVmms === undefined ? {} : { pooledVmms: status.pooledVmms }),
    };
  });
}
