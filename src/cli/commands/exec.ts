import { readFile, writeFile } from "node:fs/promises";
import type { Command } from "commander";
import { CliError, usage } from "../errors.js";
import { parsePairs, repeatable } from "../output.js";
import type { Connect } from "../program.js";
import { loadSdk } from "../sdk.js";

/** `warren exec`, `warren shell`, `warren cp`: work inside a sandbox. */
export function execCommands(program: Command, connect: Connect): void {
  program
    .command("exec <id> <command...>")
    .description("run a command in a sandbox, streaming its output; exits with its exit code")
    .usage("<id> -- <command...>")
    .option("-u, --user <name>", "run as this user (default: user, the sandbox's own)")
    .option("-w, --cwd <dir>", "working directory")
    .option("-e, --env <key=value>", "environment variable, repeatable", repeatable)
    .action(async (id: string, argv: string[], opts, cmd: Command) => {
      const connection = connect(cmd);
      const { CommandExitError, Sandbox } = await loadSdk(connection);
      const sandbox = await Sandbox.connect(id);
      const envs = parsePairs(opts.env, "--env");
      try {
        // One word is a command line for the shell (`exec id -- "ls | wc -l"`), as with ssh.
        const line = argv.length === 1 ? (argv[0] as string) : shellJoin(argv);
        await sandbox.commands.run(line, {
          timeoutMs: 0,
          ...(opts.user && { user: opts.user }),
          ...(opts.cwd && { cwd: opts.cwd }),
          envs,
          onStdout: (data) => {
            process.stdout.write(data);
          },
          onStderr: (data) => {
            process.stderr.write(data);
          },
        });
      } catch (err) {
        // Its output is already out; the exit code is the command's.
        if (err instanceof CommandExitError) throw new CliError("", err.exitCode);
        throw err;
      }
    });

  program
    .command("shell <id>")
    .description("an interactive shell in a sandbox (a PTY, resized with this terminal)")
    .option("-u, --user <name>", "log in as this user")
    .action(async (id: string, opts, cmd: Command) => {
      const connection = connect(cmd);
      const { CommandExitError, Sandbox } = await loadSdk(connection);
      const sandbox = await Sandbox.connect(id);
      const stdin = process.stdin;
      const size = () => ({ cols: process.stdout.columns || 80, rows: process.stdout.rows || 24 });
      const terminal = await sandbox.pty.create({
        ...size(),
        timeoutMs: 0,
        ...(opts.user && { user: opts.user }),
        onData: (data) => {
          process.stdout.write(data);
        },
      });
      const raw = stdin.isTTY === true;
      if (raw) stdin.setRawMode(true);
      // One write at a time: sent at once, keystrokes can arrive out of order.
      let sending = Promise.resolve();
      const onInput = (chunk: Buffer) => {
        sending = sending
          .then(() => sandbox.pty.sendInput(terminal.pid, new Uint8Array(chunk)))
          .catch(() => {});
      };
      const onResize = () => {
        void sandbox.pty.resize(terminal.pid, size()).catch(() => {});
      };
      stdin.on("data", onInput);
      process.stdout.on("resize", onResize);
      try {
        const result = await terminal.wait();
        if (result.exitCode !== 0) throw new CliError("", result.exitCode);
      } catch (err) {
        if (err instanceof CommandExitError) throw new CliError("", err.exitCode);
        throw err;
      } finally {
        stdin.off("data", onInput);
        process.stdout.off("resize", onResize);
        if (raw) stdin.setRawMode(false);
        stdin.pause();
      }
    });

  program
    .command("cp <source> <destination>")
    .description("copy a file into or out of a sandbox: a sandbox path is <id>:<path>")
    .action(async (source: string, destination: string, _opts, cmd: Command) => {
      const connection = connect(cmd);
      const { Sandbox } = await loadSdk(connection);
      const from = remote(source);
      const to = remote(destination);
      if (from && to)
        throw usage("copy between a sandbox and this machine: one side is a local path");
      if (!from && !to) throw usage("one side must be a sandbox path, <id>:<path>");
      if (to) {
        const sandbox = await Sandbox.connect(to.id);
        const data = await readFile(source);
        await sandbox.files.write(to.path, new Uint8Array(data).buffer as ArrayBuffer);
      } else if (from) {
        const sandbox = await Sandbox.connect(from.id);
        const data = await sandbox.files.read(from.path, { format: "bytes" });
        await writeFile(destination, data);
      }
    });
}

/** `<id>:<path>` → its parts; a local path (with no colon before a slash) → undefined. */
function remote(spec: string): { id: string; path: string } | undefined {
  const match = /^([a-z0-9]+):(.+)$/.exec(spec);
  return match ? { id: match[1] as string, path: match[2] as string } : undefined;
}

/** The words as one shell command line, each quoted unless plainly safe. */
export function shellJoin(words: readonly string[]): string {
  return words
    .map((word) =>
      /^[A-Za-z0-9_@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`,
    )
    .join(" ");
}
