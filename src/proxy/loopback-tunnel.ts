import { request } from "node:http";
import type { Socket } from "node:net";
import type { ProxyRoute } from "../orchestrator/types.js";
import { LOOPBACK_TUNNEL_PATH, LOOPBACK_TUNNEL_PROTOCOL } from "../protocol/index.js";

/**
 * A connection to `port` on the guest's loopback, through envd (the agent's
 * `handleLoopbackTunnel`): what the proxy falls back to when nothing listens on the port at
 * the guest's address, so that a server bound to 127.0.0.1 (or ::1) in the sandbox is
 * reachable as in E2B. Rejects with ECONNREFUSED when nothing listens there either (the
 * caller answers E2B's "port not open"), or with envd's refusal.
 */
export function openLoopbackTunnel(
  route: ProxyRoute,
  port: number,
  options: { readonly envdPort: number; readonly timeoutMs: number },
): Promise<Socket> {
  const { timeoutMs } = options;
  return new Promise((resolve, reject) => {
    const req = request({
      host: route.host,
      port: options.envdPort,
      path: `${LOOPBACK_TUNNEL_PATH}/${port}`,
      agent: false,
      headers: {
        connection: "Upgrade",
        upgrade: LOOPBACK_TUNNEL_PROTOCOL,
        ...(route.envdAccessToken && { "x-access-token": route.envdAccessToken }),
      },
      // The guest answers this head, bounded like any of its answers.
      maxHeaderSize: 4096,
    });
    req.setTimeout(timeoutMs, () => req.destroy(refused("envd did not open the tunnel in time")));
    req.once("upgrade", (_res, socket, head) => {
      req.setTimeout(0);
      if (head.length > 0) socket.unshift(head);
      resolve(socket);
    });
    req.once("response", (res) => {
      res.resume();
      reject(refused(`envd answered ${res.statusCode} to the loopback tunnel`));
    });
    req.once("error", (err) => reject(err));
    req.end();
  });
}

/** The error a closed port gives, so that the proxy's answer is E2B's "port not open". */
function refused(message: string): NodeJS.ErrnoException {
  const err: NodeJS.ErrnoException = new Error(message);
  err.code = "ECONNREFUSED";
  return err;
}
