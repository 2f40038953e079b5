/** One execution's request to a kernel (kernels/PROTOCOL.md). */
export interface ExecuteRequest {
  readonly code: string;
  /** This execution's own env vars: set for the run, then put back. */
  readonly env: Readonly<Record<string, string>>;
  /** The sandbox's env vars: set for good. */
  readonly globals: Readonly<Record<string, string>>;
  /** envd's own runs: no execution count, nothing in history. */
  readonly silent?: boolean;
}

/** What a kernel reports of an execution, in order; `done` is implied by execute() settling. */
export type KernelEvent =
  | { readonly type: "execution_count"; readonly count: number }
  | { readonly type: "stdout" | "stderr"; readonly text: string }
  | {
      readonly type: "result";
      readonly main: boolean;
      readonly data: Readonly<Record<string, unknown>>;
    }
  | {
      readonly type: "error";
      readonly name: string;
      readonly value: string;
      readonly traceback: string;
    };

/**
 * Receives an execution's events. `emit` answers false when the receiver is full (a slow
 * client): the kernel stops reading its process until `onDrain` is called back.
 */
export interface EventSink {
  emit(event: KernelEvent): boolean;
  onDrain(resume: () => void): void;
}

/** One context's running language process. Executions are serialised by the caller. */
export interface Kernel {
  /** Resolves once it can run code; rejects with why it could not start. */
  readonly ready: Promise<void>;
  /** False once its process is gone: the context starts another for its next run. */
  readonly alive: boolean;
  /** Runs `request` to its end, its events to `sink`. Never rejects: failures are error events. */
  execute(request: ExecuteRequest, sink: EventSink): Promise<void>;
  /** Interrupts the execution in progress; it still ends through execute(). */
  interrupt(): void;
  /** Stops the process; an execution in progress ends with an error event. */
  close(): void;
}

/** How a run ends when its kernel's process is gone (`why` says how it went). */
export function kernelExited(why: string): KernelEvent {
  return {
    type: "error",
    name: "KernelExited",
    value: `${why}; its state is lost, the next run starts a new kernel`,
    traceback: "",
  };
}
