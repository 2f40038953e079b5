import type { FastifyInstance } from "fastify";
import type { ApiContext } from "../api-context.js";

/**
 * `GET /health`: open (no API key), always 200 while the process answers; `status` says
 * whether the API serves requests yet ("starting" | "ready" | "failed").
 */
export function registerHealthRoutes(app: FastifyInstance, { service }: ApiContext): void {
  app.get("/health", async () => {
    const status = service.status();
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
