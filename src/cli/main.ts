import { CommanderError } from "commander";
import { CliError, describeError } from "./errors.js";
import { buildProgram } from "./program.js";

/** `warren`: the operator's and researcher's command (bundled as dist/cli/warren.mjs). */
async function main(): Promise<void> {
  const program = buildProgram();
  try {
    await program.command.parseAsync(process.argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      // --help and --version end this way too, with code 0.
      if (err.exitCode === 0) process.exit(0);
      process.stderr.write(`warren: ${err.message.replace(/^error: /, "")}\n`);
      process.exit(2);
    }
    if (err instanceof CliError) {
      if (err.message) process.stderr.write(`warren: ${err.message}\n`);
      process.exit(err.exitCode);
    }
    process.stderr.write(`warren: ${describeError(err, program.url())}\n`);
    process.exit(1);
  }
  // Streams (a PTY, the SDK's keep-alive pools) must not keep a finished command alive.
  process.exit(0);
}

void main();
