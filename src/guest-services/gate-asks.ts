import {
  type EgressPolicy,
  ruleFor,
  SecretHostRefusedError,
  secretsNamed,
} from "../network/index.js";
import type { Ask, LeafPem, ServicesRequest } from "./messages.js";

/** What the node gives its gates, in the server: what the guest services never hold. */
export interface GateSupplies {
  /** WARREN_EGRESS_RESOLVER: the DNS server gates resolve allowed names with. */
  readonly resolver?: string;
  /** Roots upstream servers are checked against (unset: Node's). */
  readonly upstreamCa?: readonly string[];
  /** For header rules (unset: a policy with rules is refused at the gate). */
  readonly rules?: {
    /** The egress CA's certificate for `name`, with its key. */
    leafFor(name: string): Promise<LeafPem>;
    /** A team's secret for a request to `host`; undefined when the team has none of that name. */
    secretValue(team: string, name: string, host: string): Promise<string | undefined>;
  };
}

type AskAnswer =
  | Omit<Extract<ServicesRequest, { type: "answer" }>, "id">
  | Omit<Extract<ServicesRequest, { type: "refusal" }>, "id">;

/**
 * The answer to a gate's ask, given only for what the slot's own policy (as the server set
 * it) would have the gate do: a certificate for a name its header rules cover, a secret its
 * rule for that host names, of the team the policy's secrets belong to. So a guest services
 * process gone wrong gets no more than its gates would have used anyway — never another
 * team's secrets, nor a certificate for a name no sandbox here has rules for.
 */
export async function answerAsk(
  ask: Ask,
  policy: EgressPolicy | undefined,
  supplies: GateSupplies | undefined,
): Promise<AskAnswer> {
  const rules = supplies?.rules;
  const rule =
    policy && ruleFor(ask.kind === "leaf" ? ask.name : ask.host, policy.headerRules ?? []);
  if (!rules || !rule) return refused(`${ask.slot} has no rule for that name`);
  try {
    if (ask.kind === "leaf") return { type: "answer", value: await rules.leafFor(ask.name) };
    const team = policy.secretsOf;
    const named = secretsNamed([rule]).some((n) => n.secret === ask.name);
    if (team === undefined || !named)
      return refused(`${ask.slot}'s rule does not name that secret`);
    return { type: "answer", value: (await rules.secretValue(team, ask.name, ask.host)) ?? null };
  } catch (err) {
    if (err instanceof SecretHostRefusedError) {
      return { type: "refusal", reason: "host", message: err.message };
    }
    return { type: "refusal", reason: "failed", message: "could not be answered" };
  }
}

function refused(message: string): AskAnswer {
  return { type: "refusal", reason: "refused", message };
}
