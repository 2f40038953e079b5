import { WarrenError } from "../shared/index.js";
import type { ServerStatus } from "./types.js";

/**
 * The one readiness gate. The API checks it before every route but /health, the server's
 * stand-in checks it before the orchestrator exists, and the orchestrator before work that
 * starts VMs: all with the same reasons and messages.
 */
export function assertReady(status: ServerStatus): void {
  switch (status.phase) {
    case "ready":
      return;
    case "starting":
      throw new WarrenError(
        "not_ready",
        `the server is starting${status.message ? `: ${status.message}` : " up"}`,
      );
    case "stopping":
      throw new WarrenError("shutting_down", "the server is shutting down");
    case "failed":
      throw new WarrenError(
        "start_failed",
        `the server failed to start: ${status.message ?? "see its log"}`,
      );
  }
}
