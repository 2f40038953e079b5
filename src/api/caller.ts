import type { FastifyRequest } from "fastify";
import type { SandboxInfo, SandboxService } from "../orchestrator/index.js";
import { WarrenError } from "../shared/index.js";
import type { Caller } from "../tenancy/index.js";

declare module "fastify" {
  interface FastifyRequest {
    /** Set by the authentication hook of every authenticated route. */
    caller?: Caller;
  }
}

/** The request's authenticated caller (the hook ran: a route without one is a bug). */
export function callerOf(request: FastifyRequest): Caller {
  if (!request.caller) throw new WarrenError("internal", "route reached without authentication");
  return request.caller;
}

/**
 * The sandbox, if the caller's team owns it. Another team's sandbox reads exactly as an
 * unknown id does (same reason, same message): ids must not be probed across teams.
 */
export function ownedSandbox(
  service: SandboxService,
  caller: Caller,
  sandboxId: string,
): SandboxInfo {
  const info = service.get(sandboxId);
  if (caller.teamId !== undefined && info.teamId !== caller.teamId) {
    throw new WarrenError("sandbox_not_found", `sandbox ${sandboxId} not found`);
  }
  return info;
}
