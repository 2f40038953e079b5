/**
 * Test harness: an API built on the in-memory stand-in service, plus a small `call()`
 * around `app.inject()` that sends the API key unless told otherwise.
 */
import type { FastifyInstance, LightMyRequestResponse } from "fastify";
import { type ApiOptions, createApi } from "../../../src/api/index.js";
import { InMemorySandboxService } from "../../fakes/in-memory-sandbox-service.js";
import { testAuth } from "../../helpers/auth.js";

export const API_KEY = "e2b_0123456789abcdef";

export interface Harness {
  readonly app: FastifyInstance;
  readonly service: InMemorySandboxService;
  call(
    method: "GET" | "POST" | "PUT" | "DELETE" | "PATCH",
    url: string,
    options?: { body?: unknown; headers?: Record<string, string>; apiKey?: string | null },
  ): Promise<LightMyRequestResponse>;
}

export function useApi({
  service: given,
  ...options
}: Omit<Partial<ApiOptions>, "service"> & {
  service?: InMemorySandboxService;
} = {}): Harness {
  const service = given ?? new InMemorySandboxService();
  const app = createApi({
    service: () => service,
    authenticate: testAuth(() => new Set([API_KEY])),
    ...options,
  });
  return {
    app,
    service,
    call(method, url, { body, headers = {}, apiKey = API_KEY } = {}) {
      return app.inject({
        method,
        url,
        headers: { ...(apiKey === null ? {} : { "x-api-key": apiKey }), ...headers },
        ...(body === undefined ? {} : { payload: body as object }),
      });
    },
  };
}

/** An error response, checked to be E2B's `{code, message}` with code = status. */
export function errorOf(res: LightMyRequestResponse): { code: number; message: string } {
  const body = res.json() as { code: number; message: string };
  if (body.code !== res.statusCode || typeof body.message !== "string") {
    throw new Error(`not an E2B error body for ${res.statusCode}: ${res.body}`);
  }
  return body;
}
