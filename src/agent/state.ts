import { AgentLog } from "./agent-log.js";
import { userExists } from "./users.js";

/** What `/init` configures: shared by every request the agent serves. */
export class AgentState {
  envVars: Record<string, string> = {};
  accessToken: string | undefined;
  defaultWorkdir: string | undefined;
  /**
   * The CA certificates /init last had installed, as /init sent them: the same again is
   * neither parsed nor installed (under TCG a restored guest's first X509 parse and bundle
   * rewrite cost ~200 ms of every create).
   */
  trustedCa: string | undefined;
  /** Timestamp (ms) of the newest /init applied; an older /init is stale and ignored. */
  lastInitMs: number | undefined;
  /** What envd did, for the sandbox's /logs (AgentLog). */
  readonly log = new AgentLog();
  #defaultUser: string;

  constructor(defaultUser = "user") {
    this.#defaultUser = defaultUser;
  }

  set defaultUser(name: string) {
    this.#defaultUser = name;
  }

  /** The configured default user, or root when that account does not exist in this rootfs. */
  get defaultUser(): string {
    return userExists(this.#defaultUser) ? this.#defaultUser : "root";
  }

  /** Environment every process gets before its own request envs. */
  globalEnv(): Record<string, string> {
    return { E2B_SANDBOX: "true", ...this.envVars };
  }
}
