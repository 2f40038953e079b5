import cors from "@fastify/cors";
import type { FastifyInstance } from "fastify";

/**
 * CORS on the API as E2B's serves it (infra `packages/api/internal/middleware/cors.go`), so
 * the SDK works from a web page: any origin, no credentials (the API key is a header, never
 * a cookie), the SDK's telemetry headers allowed, the list cursor, the running total and the
 * rate-limit headers readable.
 */
const ALLOWED_HEADERS = [
  "Origin",
  "Content-Length",
  "Content-Type",
  "User-Agent",
  "Authorization",
  "X-API-Key",
  "X-Team-ID",
  // The SDK's telemetry headers (src/api/metadata.ts)
  "browser",
  "lang",
  "lang_version",
  "machine",
  "os",
  "package_version",
  "processor",
  "publisher",
  "release",
  "sdk_runtime",
  "system",
];

const EXPOSED_HEADERS = [
  "X-Next-Token",
  "X-Total-Running",
  "RateLimit-Limit",
  "RateLimit-Remaining",
  "RateLimit-Reset",
  "Retry-After",
];

/** Registered first: a preflight is answered before the API key is asked for. */
export function registerCors(app: FastifyInstance): void {
  app.register(cors, {
    origin: "*",
    methods: ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"],
    allowedHeaders: ALLOWED_HEADERS,
    exposedHeaders: EXPOSED_HEADERS,
    credentials: false,
    maxAge: 43_200,
  });
}
