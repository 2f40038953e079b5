import type { RunCommand } from "./command-runner.js";
import { NetworkError } from "./errors.js";

// Connection tracking a slot must not carry from one tenant to the next. A reused slot has
// the same addresses; entries left by the last guest (an open connection out, a kept-alive
// connection from the host to its envd) would otherwise still be matched: NAT bindings and
// ESTABLISHED verdicts judged for another guest. Uses `conntrack` (conntrack-tools).

/** Forgets every connection tracked in a slot's namespace (its table is the slot's own). */
export async function flushNamespaceConntrack(run: RunCommand, netnsPath: string): Promise<void> {
  await run("nsenter", [`--net=${netnsPath}`, "conntrack", "-F"]);
}

/**
 * Forgets the host's connections from or to `cidr`: a slot's `hostAddress` (the guest's
 * masqueraded flows come from it, the host's flows to the guest go to it), or a pool's
 * whole block.
 */
export async function flushHostConntrack(run: RunCommand, cidr: string): Promise<void> {
  // One after the other: a flow from and to the block matches both, and the second delete
  // would find it gone.
  await deleteEntries(run, "--orig-src", cidr);
  await deleteEntries(run, "--orig-dst", cidr);
}

async function deleteEntries(run: RunCommand, match: string, cidr: string): Promise<void> {
  try {
    await run("conntrack", ["-D", match, cidr]);
  } catch (err) {
    // Exit 1 with "0 flow entries have been deleted": there was nothing to forget; "such
    // conntrack doesn't exist": an entry it listed ended (or someone else deleted it) first.
    const nothingLeft = /\b0 flow entries|such conntrack doesn't exist/;
    if (err instanceof NetworkError && err.exitCode === 1 && nothingLeft.test(err.stderr)) return;
    throw err;
  }
}
