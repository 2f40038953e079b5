import type { Socket } from "node:net";
import { type SecureContext, TLSSocket } from "node:tls";
import type { Logger } from "../../shared/index.js";
import { type GuestHttpTarget, serveGuestHttp } from "./guest-http.js";
import { fillHeaders, type HeaderRule, UnknownSecretError } from "./header-rules.js";

/** What a gate needs to add headers to a sandbox's HTTPS requests (the server gives it). */
export interface GateInterception {
  /** A TLS context whose certificate for `name` sandboxes trust (the node's egress CA). */
  contextFor(name: string): Promise<SecureContext>;
  /** Roots trusted for upstream servers: Node's own when unset. */
  readonly upstreamCa?: readonly string[];
  /** The value of a team's secret, or undefined when the team has none of that name. */
  /**
   * The value of a team's secret, for a request to `host`: undefined when the team has none
   * of that name; SecretHostRefusedError when it is bound to other hosts.
   */
  secretValue(team: string, name: string, host: string): Promise<string | undefined>;
}

/** Where an intercepted connection goes: the name the guest asked for, at Warren's address. */
export type InterceptTarget = GuestHttpTarget;

export interface InterceptOptions {
  readonly interception: GateInterception;
  /** The rule for the name now (read at each request: a policy update applies at once). */
  readonly rule: () => HeaderRule | undefined;
  /** Whose secrets fill the rule (the sandbox's team), now. */
  readonly team: () => string | undefined;
  /** A guest that has not finished its TLS handshake by then is dropped. Default 10 s. */
  readonly handshakeTimeoutMs?: number;
  /** From a request's last byte to its answer's head, at most. Default 60 s. */
  readonly upstreamHeadTimeoutMs?: number;
  readonly logger?: Logger;
}

/**
 * Serves one guest TLS connection for a name with header rules: terminates its TLS with a
 * certificate of the node's egress CA, then serves its HTTP/1.1 requests (ALPN offers nothing
 * else) as `serveGuestHttp` does — each checked, then relayed over TLS verified against the
 * name, as any client would — with the rule's headers set, secrets filled in here, never in
 * the guest. Returns what cuts the connection.
 */
export async function interceptTls(
  guest: Socket,
  head: Buffer,
  target: InterceptTarget,
  options: InterceptOptions,
): Promise<{ cut(): void }> {
  const context = await options.interception.contextFor(target.name);
  guest.unshift(head);
  const tlsGuest = new TLSSocket(guest, {
    isServer: true,
    secureContext: context,
    ALPNProtocols: ["http/1.1"],
  });
  // Ended through the TLS socket: it holds the guest's descriptor now.
  tlsGuest.on("error", () => tlsGuest.destroy());
  const handshake = setTimeout(() => tlsGuest.destroy(), options.handshakeTimeoutMs ?? 10_000);
  tlsGuest.once("secure", () => clearTimeout(handshake));
  guest.once("close", () => clearTimeout(handshake));
  // The TLS socket reads the guest's socket from here on (the head first): the guest's own
  // stays paused, or it would take bytes the TLS layer needs.
  return serveGuestHttp(tlsGuest, target, {
    tls: { ...(options.interception.upstreamCa && { ca: options.interception.upstreamCa }) },
    setHeaders: () => ruleHeaders(target, options),
    ...(options.upstreamHeadTimeoutMs !== undefined && {
      upstreamHeadTimeoutMs: options.upstreamHeadTimeoutMs,
    }),
    logger: options.logger,
  });
}

/** The rule's headers now, its secrets filled in (UnknownSecretError for one the team lacks). */
async function ruleHeaders(
  target: InterceptTarget,
  options: InterceptOptions,
): Promise<ReadonlyMap<string, string>> {
  const rule = options.rule();
  if (!rule) return new Map();
  const team = options.team();
  const filled = await fillHeaders(rule, async (secret) => {
    const value =
      team === undefined
        ? undefined
        : await options.interception.secretValue(team, secret, target.name);
    if (value === undefined) throw new UnknownSecretError(secret);
    return value;
  });
  options.logger?.debug({ name: target.name, rule: rule.domain }, "egress_gate.rule_applied");
  return filled;
}
