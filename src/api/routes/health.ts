import type { FastifyInstance } from "fastify";
import { isValidApiKey, presentedApiKey } from "../../shared/api-key-auth.js";
import type { ApiContext } from "../api-context.js";

/**
 * `GET /health`: open (no API key), always 200 while the process answers; `status` says
 * whether the API serves requests yet ("starting" | "ready" | "failed"). That is all a
 * caller without a valid key learns: the rest (the accelerator and why, a start failure's
 * message, the warm pools' size) names paths, hosts and configuration, and goes to callers
 * with a key (and to the log).
 */
export function registerHealthRoutes(
  app: FastifyInstance,
  { service }: ApiContext,
  apiKeys: () => ReadonlySet<string>,
): void {
  app.get("/health", async (request) => {
    const status = service.status();
    if (!isValidApiKey(presentedApiKey(request.headers), apiKeys()))
      return { status: status.phase };
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
