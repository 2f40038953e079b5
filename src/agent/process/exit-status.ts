import { constants } from "node:os";

/** Signal descriptions as Go's syscall.Signal.String() prints them (what envd reports). */
const SIGNAL_TEXT: Record<string, string> = {
  SIGHUP: "hangup",
  SIGINT: "interrupt",
  SIGQUIT: "quit",
  SIGILL: "illegal instruction",
  SIGTRAP: "trace/breakpoint trap",
  SIGABRT: "aborted",
  SIGBUS: "bus error",
  SIGFPE: "floating point exception",
  SIGKILL: "killed",
  SIGUSR1: "user defined signal 1",
  SIGSEGV: "segmentation fault",
  SIGUSR2: "user defined signal 2",
  SIGPIPE: "broken pipe",
  SIGALRM: "alarm clock",
  SIGTERM: "terminated",
};

export interface ExitStatus {
  readonly exitCode: number;
  readonly exited: boolean;
  readonly status: string;
  readonly error?: string;
}

/** Describes how a process ended, in the words of Go's os.ProcessState (exit code -1 on a signal). */
export function exitStatus(
  code: number | null,
  signal: NodeJS.Signals | number | null,
): ExitStatus {
  if (signal !== null && signal !== 0) {
    const name =
      typeof signal === "number"
        ? Object.entries(constants.signals).find(([, n]) => n === signal)?.[0]
        : signal;
    const text =
      (name && SIGNAL_TEXT[name]) ?? `signal ${typeof signal === "number" ? signal : name}`;
    const status = `signal: ${text}`;
    return { exitCode: -1, exited: false, status, error: status };
  }
  const exitCode = code ?? 0;
  const status = `exit status ${exitCode}`;
  return exitCode === 0
    ? { exitCode, exited: true, status }
    : { exitCode, exited: true, status, error: status };
}
