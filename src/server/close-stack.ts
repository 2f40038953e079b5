import type { Logger } from "../shared/index.js";

/**
 * What the node started, stopped in the reverse order: the last part started goes first,
 * since it may stand on the earlier ones. A part that fails to stop does not keep the others
 * running: every part is stopped, then the first failure is thrown.
 */
export class CloseStack {
  readonly #parts: { readonly name: string; readonly close: () => unknown }[] = [];

  add(name: string, close: () => unknown): void {
    this.#parts.push({ name, close });
  }

  async close(log: Logger): Promise<void> {
    let first: unknown;
    for (const { name, close } of this.#parts.splice(0).reverse()) {
      try {
        await close();
      } catch (err) {
        log.warn({ err, part: name }, "server.part_close_failed");
        first ??= err;
      }
    }
    if (first !== undefined) throw first;
  }
}
