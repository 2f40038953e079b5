import type { IncomingMessage, ServerResponse } from "node:http";
import { ENVD_LOGS_PATH } from "../../protocol/index.js";
import { WarrenError } from "../../shared/index.js";
import { ACCESS_TOKEN_HEADER, requireAccessToken } from "../auth.js";
import type { AgentState } from "../state.js";
import { downloadFile, uploadFiles } from "./files.js";
import { handleInit, type InitHooks } from "./init.js";
import type { MetricsReader } from "./metrics.js";
import { sendEmpty, sendError, sendJson } from "./respond.js";

export interface RestContext extends InitHooks {
  readonly state: AgentState;
  readonly metrics: MetricsReader;
}

/** envd's plain HTTP routes: /health, /files, /init, /envs, /metrics. */
export function createRestHandler(ctx: RestContext) {
  const { state } = ctx;
  const requireToken = (req: IncomingMessage) =>
    requireAccessToken(state, req.headers[ACCESS_TOKEN_HEADER] as string | undefined);

  async function route(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const key = `${req.method} ${url.pathname}`;
    switch (key) {
      case "GET /health":
      case "HEAD /health":
        return sendEmpty(res, 204);
      case "GET /files":
      case "HEAD /files":
        return downloadFile(state, req, res, url);
      case "POST /files":
        return uploadFiles(state, req, res, url);
      case "POST /init":
        return handleInit(state, ctx, req, res);
      case "GET /envs":
        requireToken(req);
        return sendJson(res, 200, state.globalEnv());
      case "GET /metrics":
        requireToken(req);
        return sendJson(res, 200, await ctx.metrics.read());
      case `GET ${ENVD_LOGS_PATH}`: {
        requireToken(req);
        const after = Number(url.searchParams.get("after") ?? 0);
        return sendJson(res, 200, state.log.after(Number.isSafeInteger(after) ? after : 0));
      }
    }
    const known = ["/health", "/files", "/init", "/envs", "/metrics", ENVD_LOGS_PATH].includes(
      url.pathname,
    );
    if (known)
      throw new WarrenError(
        "method_not_allowed",
        `method ${req.method} is not allowed on ${url.pathname}`,
      );
    throw new WarrenError("not_found", `no route for ${req.method} ${url.pathname}`);
  }

  return (req: IncomingMessage, res: ServerResponse): void => {
    const url = new URL(req.url ?? "/", "http://envd");
    route(req, res, url).catch((err) => sendError(res, err));
  };
}
