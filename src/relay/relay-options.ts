import type { Socket } from "node:net";
import type { ProxyErrorBody } from "./error-answer.js";
import type { UpstreamLimits } from "./upstream.js";

/** What relaying one request or upgrade may do besides streaming; every field optional. */
export interface RelayOptions extends UpstreamLimits {
  /**
   * Another way to the upstream, tried once when its address refused the connection before
   * any byte went (the proxy's loopback tunnel through envd).
   */
  readonly fallback?: () => Promise<Socket>;
  /**
   * Registers the exchange's `cut` (the proxy: when the sandbox stops); returns the
   * unregistration, called when the exchange ends.
   */
  readonly track?: (cut: (why: Cut) => void) => () => void;
  /**
   * The refusal to answer when the upstream failed before answering (`connected`: its TCP
   * connection was up). Without it nothing is sent and the outcome is `unreachable`.
   */
  readonly refuse?: (error: Error, connected: boolean) => ProxyErrorBody;
  /** Told how the exchange went (the proxy logs it). */
  readonly observer?: RelayObserver;
}

/** Why an exchange is cut, and what a client not yet answered gets. */
export interface Cut {
  /** What `observer.ended` is told, e.g. `sandbox_stopped`. */
  readonly outcome: string;
  readonly refusal: ProxyErrorBody;
}

export interface RelayObserver {
  /**
   * The exchange is over: `ok`, `client_closed`, `client_error`, `upstream_error`,
   * `upstream_closed`, `bad_upstream_head`, `idle_timeout`, `refused_upgrade`,
   * `intercepted` or a cut's outcome; `status` is what the client got, if anything.
   */
  ended(outcome: string, status: number | undefined): void;
  /**
   * The upstream failed: a plain request's before or after its answer started (`status`:
   * the one the client already got), an upgrade's before any answer.
   */
  failed(error: Error, status: number | undefined): void;
  /** The upgrade was switched: the two sockets are piped. */
  upgraded?(): void;
}

/** How a relay settled for its caller (the promise resolves once this is known). */
export type RelayOutcome =
  /** The upstream answered and its answer is on its way to the client. */
  | { readonly kind: "relayed"; readonly status: number }
  /** The upstream answered with a status the caller takes over (`intercept`); nothing was sent. */
  | {
      readonly kind: "intercepted";
      readonly status: number;
      readonly body: Buffer;
      /** The upstream's Retry-After, when it sent one. */
      readonly retryAfter?: string;
    }
  /** No answer came and there is no `refuse`: nothing was sent, the caller answers. */
  | { readonly kind: "unreachable"; readonly error: Error; readonly connected: boolean }
  /**
   * Over before the upstream answered: the client left, the exchange was cut, or a
   * refusal was answered (`status`). Nothing is left to answer.
   */
  | { readonly kind: "ended"; readonly status?: number };
