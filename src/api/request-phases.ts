import type { FastifyInstance, FastifyRequest, RouteHandlerMethod } from "fastify";
import { PhaseTimes, phase, recordPhases } from "../shared/phases.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Where the handler's time went (`timeHandlers`): the orchestrator's steps and below. */
    phases?: PhaseTimes;
    /** The handler's wall time, ms (`timeHandlers`). */
    handlerMs?: number;
  }
}

/**
 * Times every route of `api` registered after this call: its handler's time is the
 * orchestrator's, less the phases recorded inside it (jail, VMM, guest, network...).
 */
export function timeHandlers(api: FastifyInstance): void {
  api.addHook("onRoute", (route) => {
    const handler = route.handler as RouteHandlerMethod;
    route.handler = function (this: FastifyInstance, request, reply) {
      const phases = new PhaseTimes();
      request.phases = phases;
      const started = performance.now();
      return recordPhases(phases, () =>
        phase("orchestrator", async () => handler.call(this, request, reply)),
      ).finally(() => {
        request.handlerMs = performance.now() - started;
      });
    };
  });
}

/**
 * The split of a request that reached a VM, its guest or its network, for its log line:
 * milliseconds by category (`api`: what the handler did not cover — routing, authentication,
 * validation, the reply) and by phase (concurrent steps, a fork's children, each count
 * theirs). Undefined for requests that touched none of them.
 */
export function requestSplit(
  request: FastifyRequest,
  durationMs: number,
): { split: Record<string, number>; phases: Record<string, number> } | undefined {
  const { phases } = request;
  if (!phases) return undefined;
  const split = phases.byCategory();
  if (Object.keys(split).every((category) => category === "orchestrator")) return undefined;
  split.api = Math.round((durationMs - (request.handlerMs ?? durationMs)) * 10) / 10;
  return { split, phases: phases.toJSON() };
}
