/**
 * The internal node API (protocol's INTERNAL_PATHS), on a node in a cluster only: what the
 * gateways alone ask of a node. The only credential taken here is the connection itself: a
 * gateway's control connection to the node's cluster port (its certificate from the cluster
 * CA and the control ALPN; the server says which requests came so: `fromControl`), which
 * the gateway never relays a client's request on. Anything else, an API key, the gateway's
 * relay connections or any header whatever, is refused (403 internal_route).
 */
import type { IncomingMessage } from "node:http";
import type { FastifyInstance } from "fastify";
import { assertReady, type ClusterNodeService } from "../../orchestrator/index.js";
import {
  type CaptureForkRequest,
  INTERNAL_API_PREFIX,
  type SpillingForkRequest,
} from "../../protocol/index.js";
import { WarrenError } from "../../shared/index.js";
import type { ApiContext } from "../api-context.js";
import { checkSandboxId } from "../input.js";
import {
  type CaptureParams,
  captureForkSchema,
  type SandboxParams,
  spillingForkSchema,
} from "../schemas.js";
import { forkInput, forkResultJson } from "./snapshots.js";

export interface InternalApiOptions {
  /** The node, as the cluster drives it; throws the readiness gate's error while it starts. */
  readonly service: () => ClusterNodeService;
  /** Whether a request came on a gateway's control connection (certificate and ALPN). */
  readonly fromControl: (req: IncomingMessage) => boolean;
}

export function registerInternalRoutes(
  app: FastifyInstance,
  context: ApiContext,
  { service, fromControl }: InternalApiOptions,
): void {
  const { domain, maxTimeoutMs } = context;
  app.register(
    async (internal) => {
      internal.addHook("onRequest", async (request) => {
        if (!fromControl(request.raw)) {
          throw new WarrenError(
            "internal_route",
            `${INTERNAL_API_PREFIX}/ is the cluster's internal node API: only its gateways call it, on their control connections to the cluster port`,
          );
        }
      });
      internal.addHook("onRequest", async () => assertReady(context.status()));
      internal.addHook("preValidation", async (request) => {
        const { sandboxID } = request.params as { sandboxID?: string };
        if (sandboxID !== undefined) checkSandboxId(sandboxID);
      });

      internal.post<{ Params: SandboxParams; Body: SpillingForkRequest }>(
        "/sandboxes/:sandboxID/fork",
        { schema: { body: spillingForkSchema } },
        async (request, reply) => {
          const input = { ...forkInput(request.body, maxTimeoutMs), local: request.body.local };
          const results = await service().forkSpilling(request.params.sandboxID, input);
          return reply.code(201).send(results.map((result) => forkResultJson(result, domain)));
        },
      );

      internal.post<{ Params: CaptureParams; Body: CaptureForkRequest }>(
        "/sandboxes/:sandboxID/fork/:snapshotID",
        { schema: { body: captureForkSchema } },
        async (request, reply) => {
          const { sandboxID, snapshotID } = request.params;
          const input = forkInput(request.body, maxTimeoutMs);
          const results = await service().forkFromCapture(sandboxID, snapshotID, input);
          return reply.code(201).send(results.map((result) => forkResultJson(result, domain)));
        },
      );

      internal.post<{ Params: SandboxParams }>(
        "/sandboxes/:sandboxID/adopt",
        async (request, reply) => {
          await service().adopt(request.params.sandboxID);
          return reply.code(204).send();
        },
      );

      // Pausing every running sandbox takes a while: answered once started.
      internal.post("/node/drain", async (request, reply) => {
        service()
          .drain()
          .catch((err: unknown) => request.log.warn({ err }, "cluster.drain_failed"));
        return reply.code(202).send();
      });

      internal.post("/node/undrain", async (_, reply) => {
        await service().undrain();
        return reply.code(204).send();
      });
    },
    { prefix: INTERNAL_API_PREFIX },
  );
}
