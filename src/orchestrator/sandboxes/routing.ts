import { ENVD_PORT } from "../../protocol/index.js";
import type { Logger } from "../../shared/index.js";
import type { RouteAccess, RouteResult, WakeCheck } from "../types.js";
import type { LiveSandbox } from "./live-sandbox.js";
import { configOf } from "./live-sandbox.js";
import type { SandboxTable } from "./sandbox-table.js";

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
 * first, if `mayWake` lets this request wake it; a request arriving mid-transition waits
 * for it (it queues on the sandbox's lock).
 */
export async function routeSandbox(
  options: RoutingOptions,
  sandboxId: string,
  port: number,
  mayWake: WakeCheck,
): Promise<RouteResult> {
  const { table } = options;
  const live = table.find(sandboxId);
  if (!live) return { kind: "not_found" };
  if (live.row.state === "paused" || live.row.state === "pausing") {
    const config = configOf(live.row);
    // A filesystem-only pause is resumed by connect alone (a reboot), as in E2B.
    const wakes = config.lifecycle.autoResume && !config.pausedWithoutMemory;
    if (!wakes || !options.ready()) return { kind: "not_found" };
    // Before anything moves: a stranger holding the URL wakes (and so pays for) nothing.
    if (!mayWake(accessOf(live, port))) return { kind: "wake_refused" };
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
  return {
    kind: "ok",
    route: {
      ...accessOf(live, port),
      host: live.slot.hostAddress,
      port,
      maskRequestHost: configOf(live.row).network.maskRequestHost,
      ...(configOf(live.row).network.httpsPorts?.includes(port) && { https: true }),
    },
  };
}

/** What the sandbox asks of traffic to `port`: envd's port is always public (envd checks). */
function accessOf(live: LiveSandbox, port: number): RouteAccess {
  return {
    sandboxId: live.row.id,
    allowPublicTraffic: configOf(live.row).network.allowPublicTraffic || port === ENVD_PORT,
    trafficAccessToken: live.row.trafficAccessToken,
    envdAccessToken: live.row.envdAccessToken,
  };
}
