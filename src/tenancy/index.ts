export { ADMIN_TOKEN_FILE, loadAdminToken } from "./admin-token.js";
export {
  ADMIN_TOKEN_HEADER,
  Authenticator,
  type AuthenticatorOptions,
  actingTeam,
  type Caller,
  requireAdmin,
  TEAM_ID_HEADER,
} from "./caller.js";
export { hashApiKey, maskOf, newApiKey, newApiKeyValue } from "./keys.js";
export { checkQuota, parseLimits, type TeamUsage } from "./limits.js";
export { TeamAdmin, type TeamSandboxes } from "./team-admin.js";
