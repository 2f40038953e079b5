import { type Connection, sdkOptions } from "./context.js";

/**
 * The e2b SDK, loaded by the commands that use it (loading it is most of the command's
 * start-up, about 250 ms, which `--help`, completion and the API-only commands skip), its
 * `Sandbox` and `Template` bound to the connection: its server and credential.
 */
export async function loadSdk(connection: Connection) {
  const { CommandExitError, E2B } = await import("e2b");
  const client = new E2B(sdkOptions(connection));
  return { CommandExitError, Sandbox: client.Sandbox, Template: client.Template };
}
