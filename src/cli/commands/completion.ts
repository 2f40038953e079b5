import type { Command } from "commander";
import { usage } from "../errors.js";

/** `warren completion bash|zsh`: a completion script for the command tree as it is. */
export function completionCommand(program: Command): void {
  program
    .command("completion <shell>")
    .description('print a shell completion script: eval "$(warren completion bash)" (or zsh)')
    .action((shell: string) => {
      if (shell !== "bash" && shell !== "zsh")
        throw usage(`no completion for ${shell}: bash or zsh`);
      process.stdout.write(completionScript(program, shell));
    });
}

/** Words after each command path ("" for the top): its subcommands and options. */
function words(command: Command, path: string, out: Map<string, string[]>): void {
  const names = command.commands.filter((c) => c.name() !== "help").map((c) => c.name());
  const options = command.options.flatMap((o) => [o.long, o.short].filter((x): x is string => !!x));
  out.set(path, [...names, ...options, "--help"]);
  for (const sub of command.commands) words(sub, path ? `${path} ${sub.name()}` : sub.name(), out);
}

export function completionScript(program: Command, shell: "bash" | "zsh"): string {
  const table = new Map<string, string[]>();
  words(program, "", table);
  const cases = [...table]
    .map(([path, list]) => `    "${path}") words="${list.join(" ")}" ;;`)
    .join("\n");
  const body = `_warren() {
  local cur path word
  cur="\${COMP_WORDS[COMP_CWORD]}"
  path=""
  for word in "\${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
    case "$word" in -*) ;; *) path="\${path:+$path }$word" ;; esac
  done
  case "$path" in
${cases}
    *) words="" ;;
  esac
  COMPREPLY=( $(compgen -W "$words" -- "$cur") )
}
complete -F _warren warren
`;
  return shell === "bash" ? body : `autoload -U +X bashcompinit && bashcompinit\n${body}`;
}
