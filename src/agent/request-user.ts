import { userFromBasicAuth } from "./auth.js";
import type { AgentState } from "./state.js";
import { lookupUser, type UserAccount } from "./users.js";

/** The account an RPC runs as: the Basic-auth user, else the agent's default user. */
export function requestUser(state: AgentState, headers: Headers): UserAccount {
  return lookupUser(userFromBasicAuth(headers.get("authorization")) ?? state.defaultUser);
}
