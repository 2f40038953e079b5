/**
 * One sandbox's lifecycle: pause, resume (deprecated), connect (v1 and v2), timeout,
 * refreshes. Durations arrive in seconds and go to the service in ms.
 */
import type { FastifyInstance } from "fastify";
import type { ApiContext } from "../api-context.js";
import { optionalSecondsToMs, secondsToMs } from "../input.js";
import { toSandboxJson } from "../responses.js";
import {
  type ConnectBody,
  connectV1Schema,
  connectV2Schema,
  type PauseBody,
  pauseSchema,
  type RefreshBody,
  type ResumeBody,
  refreshSchema,
  resumeSchema,
  type SandboxParams,
  type TimeoutBody,
  timeoutSchema,
} from "../schemas.js";

export function registerLifecycleRoutes(app: FastifyInstance, context: ApiContext): void {
  const { service, domain, maxTimeoutMs, defaultTimeoutMs } = context;

  app.post<{ Params: SandboxParams; Body: PauseBody | null }>(
    "/sandboxes/:sandboxID/pause",
    { schema: { body: pauseSchema } },
    async (request, reply) => {
      // conflict (409) when already paused: the SDK's pause() then returns false.
      const memoryless = request.body?.memory === false;
      await service().pause(
        request.params.sandboxID,
        memoryless ? { keepMemory: false } : undefined,
      );
      return reply.code(204).send();
    },
  );

  app.post<{ Params: SandboxParams; Body: ResumeBody | null }>(
    "/sandboxes/:sandboxID/resume",
    { schema: { body: resumeSchema } },
    async (request, reply) => {
      const body = request.body ?? {};
      const timeoutMs = optionalSecondsToMs("body/timeout", body.timeout, maxTimeoutMs);
      const info = await service().resume(
        request.params.sandboxID,
        timeoutMs,
        body.autoPause,
        ...rebootOf(body.memory),
      );
      return reply.code(201).send(toSandboxJson(info, domain));
    },
  );

  // 200: it was running (TTL only ever extended); 201: it was paused and has been resumed.
  // `memory: false` (the SDK's `onResume: 'reboot'`): a paused sandbox cold-boots from its disk.
  const connect = async (sandboxId: string, body: ConnectBody) => {
    const timeoutMs = optionalSecondsToMs("body/timeout", body.timeout, maxTimeoutMs);
    const { sandbox, resumed } = await service().connect(
      sandboxId,
      timeoutMs,
      ...rebootOf(body.memory),
    );
    return { status: resumed ? 201 : 200, body: toSandboxJson(sandbox, domain) };
  };

  app.post<{ Params: SandboxParams; Body: ConnectBody }>(
    "/sandboxes/:sandboxID/connect",
    { schema: { body: connectV1Schema } },
    async (request, reply) => {
      const result = await connect(request.params.sandboxID, request.body);
      return reply.code(result.status).send(result.body);
    },
  );

  app.post<{ Params: SandboxParams; Body: ConnectBody | null }>(
    "/v2/sandboxes/:sandboxID/connect",
    { schema: { body: connectV2Schema } },
    async (request, reply) => {
      const result = await connect(request.params.sandboxID, request.body ?? {});
      return reply.code(result.status).send(result.body);
    },
  );

  app.post<{ Params: SandboxParams; Body: TimeoutBody }>(
    "/sandboxes/:sandboxID/timeout",
    { schema: { body: timeoutSchema } },
    async (request, reply) => {
      const timeoutMs = secondsToMs("body/timeout", request.body.timeout, maxTimeoutMs);
      await service().setTimeout(request.params.sandboxID, timeoutMs);
      return reply.code(204).send();
    },
  );

  app.post<{ Params: SandboxParams; Body: RefreshBody | null }>(
    "/sandboxes/:sandboxID/refreshes",
    { schema: { body: refreshSchema } },
    async (request, reply) => {
      const duration = request.body?.duration;
      const durationMs =
        optionalSecondsToMs("body/duration", duration, maxTimeoutMs) ?? defaultTimeoutMs;
      await service().refresh(request.params.sandboxID, durationMs);
      return reply.code(204).send();
    },
  );
}

/** `memory: false` on a resume: cold-boot from the disk (passed only when asked). */
function rebootOf(memory: boolean | undefined): [] | [{ reboot: true }] {
  return memory === false ? [{ reboot: true }] : [];
}
