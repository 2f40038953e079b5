import { Command } from "commander";
import pkg from "../../package.json" with { type: "json" };
import { ENVD_VERSION } from "../protocol/index.js";
import { clusterCommands } from "./commands/cluster.js";
import { completionCommand } from "./commands/completion.js";
import { execCommands } from "./commands/exec.js";
import { forkCommands } from "./commands/fork.js";
import { keyCommands } from "./commands/key.js";
import { sandboxCommands } from "./commands/sandbox.js";
import { serviceCommands } from "./commands/service.js";
import { teamCommands } from "./commands/team.js";
import { templateCommands } from "./commands/template.js";
import { topCommand } from "./commands/top.js";
import { type Connection, type CredentialNeed, resolveConnection } from "./context.js";

/** Resolves the connection for a command (from its flags and the environment). */
export type Connect = (command: Command, need?: CredentialNeed) => Connection;

export interface Program {
  readonly command: Command;
  /** The URL the last command talked to, for error messages. */
  url(): string | undefined;
}

/** The `warren` command tree. */
export function buildProgram(): Program {
  let connection: Connection | undefined;
  const connect: Connect = (command, need) => {
    connection = resolveConnection(command.optsWithGlobals(), need);
    return connection;
  };
  const program = new Command("warren")
    .description("Warren: microVM sandboxes for AI agents, speaking the E2B API")
    .version(`warren ${pkg.version} (envd ${ENVD_VERSION})`, "-V, --version")
    .option(
      "--url <url>",
      "the server (default: WARREN_URL, else this host's http://127.0.0.1:3000)",
    )
    .option("--api-key <key>", "a team's API key: that team only (default: WARREN_API_KEY)")
    .option(
      "--admin-token <token>",
      "the node's admin token: every team (default: WARREN_ADMIN_TOKEN; on the node as root, its secrets/admin-token, else its secrets/api-key)",
    )
    .showHelpAfterError("(warren --help for the commands, warren <command> --help for one)")
    .exitOverride()
    .configureOutput({
      // Usage errors become one line through main's handler; help goes to stdout as usual.
      writeErr: (text) => {
        if (!text.startsWith("error:") && !text.startsWith("(warren")) process.stderr.write(text);
      },
    });
  sandboxCommands(program, connect);
  execCommands(program, connect);
  forkCommands(program, connect);
  templateCommands(program, connect);
  topCommand(program, connect);
  teamCommands(program, connect);
  keyCommands(program, connect);
  serviceCommands(program);
  clusterCommands(program);
  completionCommand(program);
  for (const command of allCommands(program))
    command.exitOverride().configureOutput(program.configureOutput());
  return { command: program, url: () => connection?.url };
}

function allCommands(command: Command): Command[] {
  return command.commands.flatMap((c) => [c, ...allCommands(c)]);
}
