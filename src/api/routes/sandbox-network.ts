/** `PUT /sandboxes/:sandboxID/network`: replace a running sandbox's egress rules. */
import type { FastifyInstance } from "fastify";
import type { NetworkUpdate } from "../../orchestrator/index.js";
import type { ApiContext } from "../api-context.js";
import { networkRules } from "../create-input.js";
import { invalid } from "../input.js";
import { type NetworkUpdateBody, networkUpdateSchema, type SandboxParams } from "../schemas.js";

export function registerNetworkRoutes(app: FastifyInstance, { service }: ApiContext): void {
  app.put<{ Params: SandboxParams; Body: NetworkUpdateBody | null }>(
    "/sandboxes/:sandboxID/network",
    { schema: { body: networkUpdateSchema } },
    async (request, reply) => {
      await service.updateNetwork(request.params.sandboxID, toNetworkUpdate(request.body ?? {}));
      return reply.code(204).send();
    },
  );
}

/**
 * E2B semantics: the body replaces the egress configuration, so an omitted list is
 * cleared. Internet access changes only when `allow_internet_access` is given.
 */
export function toNetworkUpdate(body: NetworkUpdateBody): NetworkUpdate {
  if (body.egressProxy != null) throw invalid("body/egressProxy", "is not supported by Warren");
  const rules = networkRules(body.rules ?? {});
  return {
    allowOut: body.allowOut ?? [],
    denyOut: body.denyOut ?? [],
    // Omitted or empty alike: the sandbox keeps no rules.
    ...(Object.keys(rules).length > 0 && { rules }),
    ...(body.allow_internet_access === undefined
      ? {}
      : { allowInternetAccess: body.allow_internet_access }),
  };
}
