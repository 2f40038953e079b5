import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { Interceptor } from "@connectrpc/connect";
import { type ConnectNodeAdapterOptions, connectNodeAdapter } from "@connectrpc/connect-node";
import { Filesystem } from "../protocol/gen/filesystem/filesystem_pb.js";
import { Process } from "../protocol/gen/process/process_pb.js";
import { ACCESS_TOKEN_HEADER, requireAccessToken } from "./auth.js";
import type { ClockSetter } from "./clock.js";
import { errorInterceptor } from "./connect-errors.js";
import { applyCors } from "./cors.js";
import type { EntropySeeder } from "./entropy.js";
import { createFilesystemService } from "./filesystem/filesystem-service.js";
import { WatchRegistry } from "./filesystem/watch-registry.js";
import { handleLoopbackTunnel } from "./http/loopback-tunnel.js";
import { MetricsReader } from "./http/metrics.js";
import { createRestHandler } from "./http/rest-router.js";
import { ProcessRegistry } from "./process/process-registry.js";
import { createProcessService } from "./process/process-service.js";
import { AgentState } from "./state.js";
import type { InstalledTrust } from "./trust-store.js";
import type { VolumeMounter } from "./volume-mounts.js";

export interface AgentOptions {
  /** User for requests that name none, until /init says otherwise. Default `user`. */
  readonly defaultUser?: string;
  /** Sets the system clock from /init's timestamp; only inside a guest. */
  readonly setClock?: ClockSetter;
  /** Applies /init's random seed to the system; only inside a guest. */
  readonly seedRandomness?: EntropySeeder;
  /** Mounts /init's volumes; only inside a guest. */
  readonly mountVolume?: VolumeMounter;
  /** Installs /init's CA certificates in the system's trust; only inside a guest. */
  readonly trustCa?: (pem: string) => Promise<InstalledTrust>;
}

export interface Agent {
  readonly server: Server;
  readonly state: AgentState;
  /** Stops listening, kills the processes it started and closes its watchers. */
  close(): Promise<void>;
}

/** envd: the Connect services and the REST routes on one HTTP/1.1 server. */
export function createAgent(options: AgentOptions = {}): Agent {
  const state = new AgentState(options.defaultUser);
  const processes = new ProcessRegistry();
  const watchers = new WatchRegistry();
  const tokenInterceptor: Interceptor = (next) => async (req) => {
    requireAccessToken(state, req.header.get(ACCESS_TOKEN_HEADER));
    return next(req);
  };
  const rest = createRestHandler({
    state,
    metrics: new MetricsReader(),
    setClock: options.setClock,
    seedRandomness: options.seedRandomness,
    mountVolume: options.mountVolume,
    trustCa: options.trustCa,
  });
  const rpc = connectNodeAdapter({
    routes(router) {
      router.service(Process, createProcessService(state, processes));
      router.service(Filesystem, createFilesystemService(state, watchers));
    },
    interceptors: [errorInterceptor, tokenInterceptor],
    // Only HTTP/1.1 is served, so requests are always IncomingMessage.
    fallback: rest as ConnectNodeAdapterOptions["fallback"],
  });
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (applyCors(req, res)) return;
    rpc(req, res);
  });
  // Upgrades: only the proxy's tunnel to a server on the guest's loopback.
  const tunnels = new Set<Duplex>();
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) =>
    handleLoopbackTunnel(state, tunnels, req, socket, head),
  );
  // Long-lived streams (process output, watches) rely on keepalive events, not socket timeouts.
  server.requestTimeout = 0;
  server.keepAliveTimeout = 640_000;
  return {
    server,
    state,
    async close() {
      processes.killAll();
      watchers.closeAll();
      server.closeAllConnections();
      for (const tunnel of tunnels) tunnel.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
