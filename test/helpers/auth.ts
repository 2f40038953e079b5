import type { IncomingHttpHeaders } from "node:http";
import type { TeamCatalog } from "../../src/catalog/index.js";
import { Authenticator, type Caller } from "../../src/tenancy/index.js";
import { InMemoryTeams } from "../fakes/in-memory-teams.js";

/** The admin token of tests that build the API or the gateway themselves. */
export const TEST_ADMIN_TOKEN = "test-admin-token-0123456789abcdef";

/**
 * The real Authenticator over `keys` (the default team's, as the key file's are) and a team
 * catalog (an InMemoryTeams stand-in unless given): `authenticate` for createApi and the gateway.
 */
export function testAuth(
  keys: () => ReadonlySet<string>,
  teams: TeamCatalog = new InMemoryTeams(),
): (headers: IncomingHttpHeaders) => Promise<Caller> {
  const authenticator = new Authenticator({
    adminToken: TEST_ADMIN_TOKEN,
    fileKeys: keys,
    teams: () => teams,
  });
  return (headers) => authenticator.authenticate(headers);
}
