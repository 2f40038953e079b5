/**
 * The tail of a guest's serial console, kept in memory and bounded: a guest printing
 * without end costs a fixed amount of the server's memory and no disk.
 */
export class ConsoleTail {
  #chunks: Buffer[] = [];
  #bytes = 0;

  constructor(readonly limitBytes = 64 * 1024) {}

  append(chunk: Buffer): void {
    this.#chunks.push(chunk);
    this.#bytes += chunk.length;
    while (this.#bytes - (this.#chunks[0]?.length ?? 0) >= this.limitBytes) {
      this.#bytes -= this.#chunks.shift()?.length ?? 0;
    }
  }

  /** The last `limitBytes` (at most) of the console, as text. */
  text(): string {
    const all = Buffer.concat(this.#chunks);
    return all.subarray(Math.max(0, all.length - this.limitBytes)).toString("utf8");
  }
}

/** The guest console's chardev id, and the size of QEMU's ring buffer behind it (a power of 2). */
export const CONSOLE_CHARDEV = "console";
export const CONSOLE_RING_BYTES = 64 * 1024;
/** How often a running VM's console is drained without being asked: what a crash report shows. */
const DRAIN_EVERY_MS = 5_000;

/** The one QMP call a console needs. */
interface ConsoleQmp {
  execute<T = unknown>(command: string, args?: Record<string, unknown>): Promise<T>;
}

/**
 * A guest's serial console: a ring buffer inside QEMU (`-chardev ringbuf`), which never
 * blocks the guest and outlives the server's connection (a later server reads what is still
 * in it), drained over QMP (`ringbuf-read`, base64: the bytes as the guest wrote them) into
 * a ConsoleTail, every few seconds and whenever the tail is asked for.
 */
export class GuestConsole {
  readonly #qmp: ConsoleQmp;
  readonly #tail: ConsoleTail;
  readonly #timer: NodeJS.Timeout;
  #draining: Promise<void> | undefined;

  constructor(qmp: ConsoleQmp, options: { everyMs?: number; limitBytes?: number } = {}) {
    this.#qmp = qmp;
    this.#tail = new ConsoleTail(options.limitBytes);
    this.#timer = setInterval(() => void this.drain(), options.everyMs ?? DRAIN_EVERY_MS);
    this.#timer.unref();
  }

  /** The tail, with what the guest printed up to now. */
  async text(): Promise<string> {
    await this.drain();
    return this.#tail.text();
  }

  /** The tail as last drained, asking QEMU nothing (it may be gone). */
  lastText(): string {
    return this.#tail.text();
  }

  /**
   * Moves what the ring holds into the tail; concurrent calls share one read. A failure (QEMU
   * gone, the connection closed) leaves the tail as it was: it is all there is to show.
   */
  drain(): Promise<void> {
    this.#draining ??= this.#read().finally(() => {
      this.#draining = undefined;
    });
    return this.#draining;
  }

  /** Stops the periodic drain (the VM is gone or handed over). */
  stop(): void {
    clearInterval(this.#timer);
  }

  async #read(): Promise<void> {
    const data = await this.#qmp
      .execute("ringbuf-read", {
        device: CONSOLE_CHARDEV,
        size: CONSOLE_RING_BYTES,
        format: "base64",
      })
      .catch(() => undefined);
    // The VMM may be its guest's: whatever it answers goes through the bounded tail.
    if (typeof data !== "string" || data.length === 0) return;
    const bytes = Buffer.from(data, "base64");
    if (bytes.length > 0) this.#tail.append(bytes.subarray(-this.#tail.limitBytes));
  }
}
