/** One line of envd's own log, as `/logs` of the sandbox shows it. */
export interface AgentLogEntry {
  /** Increasing from 1: the orchestrator asks for what came after the last it has. */
  readonly seq: number;
  /** Unix ms. */
  readonly timestamp: number;
  readonly level: "info" | "warn" | "error";
  readonly message: string;
}

/** Lines kept (and most given in one answer): bounded memory whatever the guest does. */
const KEPT = 1_000;
/** Longest message kept: a command line can be anything. */
const MAX_MESSAGE = 1_000;
/** What one answer holds at most, as JSON: within what the orchestrator reads of envd. */
const ANSWER_BYTES = 48 * 1024;

/**
 * envd's log of what it did (processes started and ended, /init, uploads, refused calls), in
 * memory, the last 1 000 lines: the sandbox's `/logs` shows them, as E2B's does envd's. Quiet
 * when idle: it only records what requests did.
 */
export class AgentLog {
  readonly #entries: AgentLogEntry[] = [];
  #seq = 0;

  record(level: AgentLogEntry["level"], message: string): void {
    const text = message.length > MAX_MESSAGE ? `${message.slice(0, MAX_MESSAGE)}…` : message;
    this.#entries.push({ seq: ++this.#seq, timestamp: Date.now(), level, message: text });
    if (this.#entries.length > KEPT) this.#entries.shift();
  }

  /**
   * The lines after `seq` (all kept ones for 0), oldest first; the newest ones only when
   * they would take more than `maxBytes` as JSON (the orchestrator bounds envd's answers).
   */
  after(seq: number, maxBytes = ANSWER_BYTES): AgentLogEntry[] {
    const picked: AgentLogEntry[] = [];
    let bytes = 2;
    for (let i = this.#entries.length - 1; i >= 0; i--) {
      const entry = this.#entries[i] as AgentLogEntry;
      if (entry.seq <= seq) break;
      bytes += JSON.stringify(entry).length + 1;
      if (bytes > maxBytes) break;
      picked.push(entry);
    }
    return picked.reverse();
  }
}
