/** `PUT /sandboxes/:sandboxID/network`: replace a running sandbox's egress rules. */
import type { FastifyInstance } from "fastify";
import type { NetworkUpdate } from "../../orchestrator/index.js";
import type { ApiContext } from "../api-context.js";
import { checkBoundSecrets, networkRules } from "../create-input.js";
import { invalid } from "../input.js";
import { type NetworkUpdateBody, networkUpdateSchema, type SandboxParams } from "../schemas.js";

export function registerNetworkRoutes(app: FastifyInstance, context: ApiContext): void {
  const { service } = context;
  app.put<{ Params: SandboxParams; Body: NetworkUpdateBody | null }>(
    "/sandboxes/:sandboxID/network",
    { schema: { body: networkUpdateSchema } },
    async (request, reply) => {
      const { sandboxID } = request.params;
      const update = toNetworkUpdate(request.body ?? {});
      // Whose secrets the rules name: the sandbox's team (the admin acts for any).
      const teamId = service().get(sandboxID).teamId;
      await checkBoundSecrets(update.rules, teamId, context, "body/rules");
      await service().updateNetwork(sandboxID, update);
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
