import pino from "pino";
import { handleStrayErrors } from "../shared/stray-errors.js";
import { isServicesRequest, type ServicesEvent } from "./messages.js";
import { GuestServiceTable } from "./services.js";

/**
 * The guest services process (dist/guest-services/main.mjs), started by the node server
 * (GuestServices): what parses a guest's bytes runs here, never in the server that owns the
 * VMMs. Not root: in a user namespace whose ids 0-65535 are a range of the host's own
 * (WARREN_GUEST_ID_BASE), and in a cgroup with a memory bound. Its IPC channel is its only
 * link to the server: when it closes (the server went), the process ends.
 */
const logger = pino({
  level: process.env.WARREN_LOG_LEVEL ?? "info",
  base: { component: "guest-services" },
});
// Supervised: after an uncaught exception it exits, and the server starts it again.
handleStrayErrors(logger, "guest_services", "exit");

const send = (event: ServicesEvent) => {
  if (process.connected) process.send?.(event);
};
const table = new GuestServiceTable(send, logger);

process.on("message", (message: unknown, handle: unknown) => {
  if (!isServicesRequest(message)) {
    logger.warn(
      { type: (message as { type?: unknown } | null)?.type },
      "guest_services.bad_request",
    );
    return;
  }
  table.handle(message, handle as Parameters<GuestServiceTable["handle"]>[1]);
});
process.on("disconnect", () => {
  logger.info({}, "guest_services.server_gone");
  process.exit(0);
});
logger.info({ uid: process.getuid?.(), pid: process.pid }, "guest_services.started");
send({ type: "ready" });
