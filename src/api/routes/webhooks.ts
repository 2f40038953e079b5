/**
 * A team's webhooks (E2B's `/events/webhooks`): create (201), list, get, update (PATCH: the
 * fields given), delete (200, no body, as E2B answers), each answering E2B's `WebhookDetail`
 * with how its deliveries go (`lastDelivery`, `failures`: Warren's). The signature secret is
 * write-only. The admin acts as the team it
 * names (X-Team-ID), as for secrets.
 */
import type { FastifyInstance, FastifyRequest } from "fastify";
import type { WebhookInput, Webhooks } from "../../events/index.js";
import { WarrenError } from "../../shared/index.js";
import { actingTeam } from "../../tenancy/index.js";
import type { ApiContext } from "../api-context.js";
import { callerOf } from "../caller.js";

interface WebhookParams {
  webhookID: string;
}

export function registerWebhookRoutes(app: FastifyInstance, context: ApiContext): void {
  const team = (request: FastifyRequest) => actingTeam(callerOf(request));
  const webhooks = () => webhooksOf(context);

  app.post<{ Body: WebhookInput | null }>("/events/webhooks", async (request, reply) =>
    reply.code(201).send(await webhooks().create(team(request), bodyOf(request.body))),
  );
  app.get("/events/webhooks", async (request) => webhooks().list(team(request)));
  app.get<{ Params: WebhookParams }>("/events/webhooks/:webhookID", async (request) =>
    webhooks().get(team(request), request.params.webhookID),
  );
  app.patch<{ Params: WebhookParams; Body: WebhookInput | null }>(
    "/events/webhooks/:webhookID",
    async (request) =>
      webhooks().update(team(request), request.params.webhookID, bodyOf(request.body)),
  );
  app.delete<{ Params: WebhookParams }>("/events/webhooks/:webhookID", async (request, reply) => {
    await webhooks().delete(team(request), request.params.webhookID);
    return reply.code(200).send();
  });
}

function bodyOf(body: WebhookInput | null | undefined): WebhookInput {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new WarrenError("invalid_argument", "body must be a JSON object");
  }
  return body;
}

function webhooksOf(context: ApiContext): Webhooks {
  if (!context.webhooks) throw new WarrenError("unavailable", "webhooks are not served here");
  return context.webhooks();
}
