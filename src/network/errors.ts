import { WarrenError } from "../shared/index.js";

/**
 * A command that sets up or tears down a slot failed. Carries the command line and what it
 * printed on stderr, which is where `ip` and `iptables` say what went wrong.
 */
export class NetworkError extends WarrenError {
  constructor(
    message: string,
    /** The command that failed: program, then arguments. */
    readonly command: readonly string[],
    /** Its stderr, trimmed ("" when it did not start). */
    readonly stderr: string,
    /** Its exit code; undefined when it did not start or was killed. */
    readonly exitCode?: number,
    options?: { cause?: unknown },
  ) {
    super("network_failed", message, options);
  }
}

/** An egress policy entry is not an IPv4 address or CIDR (or the policy is malformed). */
export class EgressPolicyError extends WarrenError {
  constructor(
    message: string,
    /** The offending entry, as given. */
    readonly entry: string,
  ) {
    super("invalid_argument", message);
  }
}

/**
 * A slot's namespace or host veth already exists: left by an earlier server (run
 * cleanupStale at startup) or owned by another process. Nothing was changed.
 */
export class SlotTakenError extends WarrenError {
  constructor(
    message: string,
    readonly index: number,
  ) {
    super("already_exists", message);
  }
}
