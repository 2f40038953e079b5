import type { TemplateRow } from "../../catalog/index.js";
import type { GuestArtifacts } from "../../host-setup/index.js";
import { type Logger, WarrenError } from "../../shared/index.js";
import type { MachineShape } from "../../vmm/index.js";
import type { DiskSpace } from "../disk-space.js";
import type { BootTemplateInput } from "../types.js";
import {
  type BaseTemplateOptions,
  bootTemplate,
  ensureBaseTemplate,
  ensureBuiltinTemplate,
} from "./base-template.js";
import { CODE_INTERPRETER_TEMPLATE, codeInterpreterTemplate } from "./code-interpreter-template.js";

export interface BuiltInTemplatesOptions {
  /** What booting a template (base, the code interpreter's, a build's image) needs. */
  readonly boot: Omit<BaseTemplateOptions, "shape">;
  /** The built-in templates' shape. */
  readonly shape: MachineShape;
  readonly disk: DiskSpace;
  /** Capture code-interpreter-v1 at start (WARREN_CODE_INTERPRETER). */
  readonly codeInterpreter: boolean;
  /** Its rootfs, when host setup built one. */
  readonly codeInterpreterRootfs: GuestArtifacts["codeInterpreterRootfs"];
  readonly logger: Logger;
}

/**
 * The templates a node makes itself: `base` (at start, before the node is ready),
 * `code-interpreter-v1` (captured in the background after), and templates booted cold for
 * builds, each admitted against the disk first.
 */
export class BuiltInTemplates {
  readonly #o: BuiltInTemplatesOptions;
  /** The code-interpreter-v1 template's capture in progress, when one runs. */
  #codeInterpreter: Promise<unknown> | undefined;
  /** Why that capture failed, for a create that asks for the template. */
  #codeInterpreterFailure: string | undefined;

  constructor(options: BuiltInTemplatesOptions) {
    this.#o = options;
  }

  ensureBase(): Promise<TemplateRow> {
    return ensureBaseTemplate({ ...this.#o.boot, shape: this.#o.shape });
  }

  /** A template booted cold from an image (a build's layer), once the disk can hold it. */
  boot(input: BootTemplateInput): Promise<TemplateRow> {
    const { diskSizeMiB, memoryMiB } = input.shape;
    // A qcow2 disk is thin: a larger one costs nothing until its guest fills the host's disk.
    const ceiling = this.#o.disk.ceilingMiB();
    if (diskSizeMiB !== undefined && diskSizeMiB > ceiling) {
      throw new WarrenError(
        "invalid_argument",
        `a template disk of ${diskSizeMiB} MiB is more than this node could ever hold: at most ${ceiling} MiB (the data dir's filesystem less WARREN_DISK_RESERVE_MIB)`,
      );
    }
    // Its capture writes the guest's memory.
    this.#o.disk.admit("booting a template", memoryMiB * 1024 * 1024);
    return bootTemplate(this.#o.boot, input);
  }

  /**
   * Captures code-interpreter-v1 in the background (a cold boot, kernels started: a minute
   * or more under TCG) when asked and setup built its rootfs; a failure is logged, and the
   * template stays missing until the next start.
   */
  startCodeInterpreter(): void {
    const rootfs = this.#o.codeInterpreterRootfs;
    if (!this.#o.codeInterpreter || !rootfs) return;
    const capture = ensureBuiltinTemplate(
      { ...this.#o.boot, shape: this.#o.shape },
      codeInterpreterTemplate(rootfs),
    ).then(
      (row) => this.#o.logger.info({ template: row.id }, "code_interpreter.ready"),
      (err: unknown) => {
        this.#codeInterpreterFailure = err instanceof Error ? err.message : String(err);
        this.#o.logger.error({ err }, "code_interpreter.capture_failed");
      },
    );
    this.#codeInterpreter = capture.finally(() => {
      this.#codeInterpreter = undefined;
    });
  }

  /**
   * Finds `templateId` with `find`; a create of code-interpreter-v1 waits for its capture
   * first, and hears why it is missing in words that say what to do.
   */
  async find<T>(templateId: string, find: () => Promise<T>): Promise<T> {
    if (templateId !== CODE_INTERPRETER_TEMPLATE) return find();
    await this.#codeInterpreter;
    return find().catch(() => {
      throw new WarrenError(
        "template_not_found",
        `template '${CODE_INTERPRETER_TEMPLATE}' not found: ${this.#codeInterpreterMissing()}`,
      );
    });
  }

  #codeInterpreterMissing(): string {
    if (!this.#o.codeInterpreter)
      return "this server runs without the code interpreter: start it with WARREN_CODE_INTERPRETER=on";
    if (!this.#o.codeInterpreterRootfs)
      return "host setup has not built its rootfs (npm run setup, WARREN_CODE_INTERPRETER not off)";
    return `its capture failed when the server started (${this.#codeInterpreterFailure ?? "see the server's log"}); a restart tries again`;
  }
}
