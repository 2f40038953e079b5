import type { ProxyRoute, RouteResult, SandboxRouter } from "../../src/orchestrator/types.js";

/** One sandbox as the fake router knows it. */
export interface FakeSandbox {
  /** Sandbox port → the local port of the test server standing in for it. */
  readonly ports: Record<number, number>;
  readonly host?: string;
  readonly allowPublicTraffic?: boolean;
  readonly trafficAccessToken?: string;
  readonly maskRequestHost?: string;
  readonly envdAccessToken?: string;
  /** Ports that serve HTTPS (the sandbox's `httpsPorts`). */
  readonly httpsPorts?: readonly number[];
  /** Set: route() answers conflict with this message (a sandbox mid-transition). */
  readonly conflict?: string;
}

/**
 * A stand-in for the orchestrator: an in-memory `SandboxRouter` the tests fill by hand.
 * Sandboxes live at 127.0.0.1; each sandbox port maps to a real test server's port, and a
 * port with no server maps to `closedPort` (nothing listens there).
 */
export class FakeRouter implements SandboxRouter {
  readonly sandboxes = new Map<string, FakeSandbox>();
  readonly routed: Array<{ sandboxId: string; port: number }> = [];
  readonly #listeners = new Set<(sandboxId: string) => void>();

  constructor(readonly closedPort: number) {}

  add(sandboxId: string, sandbox: FakeSandbox): void {
    this.sandboxes.set(sandboxId, sandbox);
  }

  /** The sandbox stops: forgotten here, and the proxy is told. */
  stop(sandboxId: string): void {
    this.sandboxes.delete(sandboxId);
    for (const listener of this.#listeners) listener(sandboxId);
  }

  async route(sandboxId: string, port: number): Promise<RouteResult> {
    this.routed.push({ sandboxId, port });
    const sandbox = this.sandboxes.get(sandboxId);
    if (!sandbox) return { kind: "not_found" };
    if (sandbox.conflict !== undefined) return { kind: "conflict", message: sandbox.conflict };
    const route: ProxyRoute = {
      sandboxId,
      host: sandbox.host ?? "127.0.0.1",
      port: sandbox.ports[port] ?? this.closedPort,
      allowPublicTraffic: sandbox.allowPublicTraffic ?? true,
      ...(sandbox.trafficAccessToken !== undefined && {
        trafficAccessToken: sandbox.trafficAccessToken,
      }),
      ...(sandbox.maskRequestHost !== undefined && { maskRequestHost: sandbox.maskRequestHost }),
      ...(sandbox.envdAccessToken !== undefined && { envdAccessToken: sandbox.envdAccessToken }),
      ...(sandbox.httpsPorts?.includes(port) && { https: true }),
    };
    return { kind: "ok", route };
  }

  sandboxWithToken(matches: (envdAccessToken: string) => boolean): string | undefined {
    for (const [id, sandbox] of this.sandboxes) {
      if (sandbox.envdAccessToken !== undefined && matches(sandbox.envdAccessToken)) return id;
    }
    return undefined;
  }

  onSandboxStopped(listener: (sandboxId: string) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }
}
