import { ENVD_PORT } from "../protocol/index.js";
import type { Logger } from "../shared/index.js";
import { configOf } from "./live-sandbox.js";
import type { SandboxTable } from "./sandbox-table.js";
import type { RouteResult } from "./types.js";

export interface RoutingOptions {
  readonly table: SandboxTable;
  /** Whether the node serves sandboxes now (readiness). */
  readonly ready: () => boolean;
  /** Resumes a paused sandbox (or waits for a resume in flight), as `connect` does. */
  readonly resume: (sandboxId: string) => Promise<unknown>;
  readonly logger: Logger;
}

/**
 * Where the proxy sends a sandbox's traffic. A paused sandbox with autoResume is resumed
 * first; a request arriving mid-transition waits for it (it queues on the sandbox's lock).
 */
export async function routeSandbox(
  options: RoutingOptions,
  sandboxId: string,
  port: number,
): Promise<RouteResult> {
  const { table } = options;
  const live = table.find(sandboxId);
  if (!live) return { kind: "not_found" };
  if (live.row.state === "paused" || live.row.state === "pausing") {
    const config = configOf(live.row);
    // A filesystem-only pause is resumed by connect alone (a reboot), as in E2B.
    const wakes = config.lifecycle.autoResume && !config.pausedWithoutMemory;
    if (!wakes || !options.ready()) return { kind: "not_found" };
    try {
      await options.resume(sandboxId);
    } catch (err) {
      options.logger.warn({ sandboxId, err }, "sandbox.auto_resume_failed");
      return { kind: "not_found" };
    }
  } else if (live.row.state === "creating" || live.row.state === "resuming") {
    await table.serial(sandboxId, async () => {});
  }
  // Being killed is as good as gone: the SDK's health probe after a cut stream must read
  // it as not found (502), as E2B's proxy answers once the sandbox is off its catalog.
  if (live.row.state === "killing") return { kind: "not_found" };
  if (live.row.state === "pausing") {
    return { kind: "conflict", message: `sandbox ${sandboxId} is ${live.row.state}` };
  }
  if (live.row.state !== "running" || !live.slot || !table.has(sandboxId)) {
    return { kind: "not_found" };
  }
  const config = configOf(live.row);
  return {
    kind: "ok",
    route: {
      sandboxId,
      host: live.slot.hostAddress,
      port,
      trafficAccessToken: live.row.trafficAccessToken,
      allowPublicTraffic: config.network.allowPublicTraffic || port === ENVD_PORT,
      maskRequestHost: config.network.maskRequestHost,
      envdAccessToken: live.row.envdAccessToken,
    },
  };
}
