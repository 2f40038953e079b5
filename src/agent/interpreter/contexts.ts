import { randomUUID } from "node:crypto";
import { stat } from "node:fs/promises";
import type { Kernel } from "./kernel.js";
import { isLanguage, LANGUAGES, type Language, normalizeLanguage } from "./languages.js";

/** An error the interpreter answers with `status` and `message` as its text body. */
export class InterpreterError extends Error {
  constructor(
    readonly status: 400 | 401 | 404 | 500,
    message: string,
  ) {
    super(message);
  }
}

/** Starts contexts' kernels. */
export interface KernelStarter {
  /** The kernel of a context (its process is starting when it returns; see `ready`). */
  start(language: Language, cwd: string): Kernel;
  /** Stops what it keeps for later starts (a zygote); kernels it started are left running. */
  close(): void;
}

/** What `GET /contexts` lists: E2B's Context. */
export interface ContextInfo {
  readonly id: string;
  readonly language: Language;
  readonly cwd: string;
}

/** One context: its kernel, and its executions one at a time. */
export class Context implements ContextInfo {
  #tail: Promise<unknown> = Promise.resolve();

  constructor(
    readonly id: string,
    readonly language: Language,
    readonly cwd: string,
    public kernel: Kernel,
    private readonly starter: KernelStarter,
  ) {}

  /** Runs `work` once every earlier run has ended, on a live kernel (a dead one is replaced). */
  serial<T>(work: (kernel: Kernel) => Promise<T>): Promise<T> {
    const run = this.#tail.then(async () => {
      if (!this.kernel.alive) await this.replaceKernel();
      return work(this.kernel);
    });
    this.#tail = run.catch(() => {});
    return run;
  }

  /** A fresh kernel in place of the current one (restart, or after it died); its state is gone. */
  async replaceKernel(): Promise<void> {
    this.kernel.close();
    this.kernel = this.starter.start(this.language, this.cwd);
    await startedOrThrow(this.kernel, "Failed to restart context");
  }

  info(): ContextInfo {
    return { id: this.id, language: this.language, cwd: this.cwd };
  }
}

/**
 * The interpreter's contexts: those made on request, and one default per language (made at
 * start for python and javascript, else on first use). The python default is also the
 * context of an `/execute` that names neither context nor language.
 */
export class Contexts {
  readonly #byId = new Map<string, Context>();
  readonly #defaults = new Map<Language, Promise<Context>>();

  constructor(
    private readonly starter: KernelStarter,
    readonly defaultCwd: string,
  ) {}

  /** Starts the defaults E2B's server starts with, and waits until they run code. */
  async startDefaults(): Promise<void> {
    await Promise.all([this.defaultFor("python"), this.defaultFor("javascript")]);
  }

  async create(
    language: string | null | undefined,
    cwd: string | null | undefined,
  ): Promise<Context> {
    const lang = supported(normalizeLanguage(language));
    const dir = cwd || this.defaultCwd;
    const isDir = await stat(dir).then(
      (s) => s.isDirectory(),
      () => false,
    );
    if (!isDir) throw new InterpreterError(400, `cwd '${dir}' is not a directory in the sandbox`);
    const context = new Context(
      randomUUID(),
      lang,
      dir,
      this.starter.start(lang, dir),
      this.starter,
    );
    // Listed in the order asked for (the defaults: python, then javascript), not of readiness.
    this.#byId.set(context.id, context);
    try {
      await startedOrThrow(context.kernel, "Failed to create context");
    } catch (err) {
      this.#byId.delete(context.id);
      throw err;
    }
    return context;
  }

  /** The language's default context, made on first use (once, however many ask at once). */
  defaultFor(language: string | null | undefined): Promise<Context> {
    const lang = supported(normalizeLanguage(language));
    let context = this.#defaults.get(lang);
    if (!context) {
      context = this.create(lang, this.defaultCwd);
      this.#defaults.set(lang, context);
      // A failed start is not remembered: the next call tries again.
      context.catch(() => this.#defaults.delete(lang));
    }
    return context;
  }

  get(id: string): Context {
    const context = this.#byId.get(id);
    if (!context) throw new InterpreterError(404, `Context ${id} not found`);
    return context;
  }

  list(): ContextInfo[] {
    return [...this.#byId.values()].map((c) => c.info());
  }

  remove(id: string): void {
    const context = this.get(id);
    this.#byId.delete(id);
    context.kernel.close();
    for (const [lang, made] of this.#defaults) {
      // Settled already: the check runs before any other request is handled.
      made.then(
        (resolved) => {
          if (resolved === context && this.#defaults.get(lang) === made)
            this.#defaults.delete(lang);
        },
        () => {},
      );
    }
  }

  restart(id: string): Promise<void> {
    const context = this.get(id);
    return context.serial(() => context.replaceKernel());
  }

  /** Stops every kernel and what starts them: the interpreter is shutting down. */
  closeAll(): void {
    for (const context of this.#byId.values()) context.kernel.close();
    this.starter.close();
  }
}

function supported(language: string): Language {
  if (isLanguage(language)) return language;
  throw new InterpreterError(
    400,
    `unsupported language '${language}': this sandbox runs ${LANGUAGES.join(", ")}`,
  );
}

async function startedOrThrow(kernel: Kernel, what: string): Promise<void> {
  try {
    await kernel.ready;
  } catch (err) {
    kernel.close();
    throw new InterpreterError(500, `${what}: ${(err as Error).message}`);
  }
}
