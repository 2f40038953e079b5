// bench:rl's Warren backend: the workloads through the unchanged SDKs (`@e2b/code-interpreter`
// for Python, `e2b` for templates, fork and snapshots), creates retried after a 429 as a
// trainer's client would.
import { Sandbox as CodeSandbox } from "@e2b/code-interpreter";
import { CommandExitError, RateLimitError, Template } from "e2b";
import { REPO_DIR, repoSetupScript } from "./rl-tasks.js";
import type { Backend, Box } from "./rl-workloads.js";

/** The template holding the repository, built from a Dockerfile by `warrenBackend`. */
const REPO_TEMPLATE = "rl-repo";
/** Under 64 concurrent clients on 2 cores calls answer late (the SDK's default is 60 s). */
const REQUEST_TIMEOUT_MS = 300_000;
const RETRY_MS = 1_000;
const MAX_RETRIES = 300;

class WarrenBox implements Box {
  constructor(readonly sandbox: CodeSandbox) {}

  get id(): string {
    return this.sandbox.sandboxId;
  }

  async sh(cmd: string): Promise<{ exitCode: number; stdout: string }> {
    try {
      const run = await this.sandbox.commands.run(cmd, {
        requestTimeoutMs: REQUEST_TIMEOUT_MS,
        timeoutMs: REQUEST_TIMEOUT_MS,
      });
      return { exitCode: run.exitCode, stdout: run.stdout };
    } catch (err) {
      if (err instanceof CommandExitError) return { exitCode: err.exitCode, stdout: err.stdout };
      throw err;
    }
  }

  async python(code: string): Promise<0 | 1> {
    const run = await this.sandbox.runCode(code, {
      requestTimeoutMs: REQUEST_TIMEOUT_MS,
      timeoutMs: REQUEST_TIMEOUT_MS,
    });
    return run.error ? 0 : 1;
  }

  async kill(): Promise<void> {
    await this.sandbox.kill({ requestTimeoutMs: REQUEST_TIMEOUT_MS });
  }
}

/** Builds the repository's template (a Dockerfile on Warren's base), then the backend. */
export async function warrenBackend(): Promise<Backend & { buildMs: number }> {
  const dockerfile = [
    "FROM e2bdev/base",
    "USER user",
    `RUN ${repoSetupScript()}`,
    `WORKDIR ${REPO_DIR}`,
  ].join("\n");
  const t = performance.now();
  await Template.build(Template().fromDockerfile(dockerfile), REPO_TEMPLATE);
  const buildMs = performance.now() - t;

  let retries = 0;
  /** A create, again after a 429 (capacity), as long as it takes. */
  async function create(template?: string): Promise<WarrenBox> {
    for (let attempt = 0; ; attempt++) {
      try {
        const opts = { requestTimeoutMs: REQUEST_TIMEOUT_MS, timeoutMs: 600_000 };
        const sandbox = template
          ? await CodeSandbox.create(template, opts)
          : await CodeSandbox.create(opts);
        return new WarrenBox(sandbox);
      } catch (err) {
        if (!(err instanceof RateLimitError) || attempt >= MAX_RETRIES) throw err;
        retries++;
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS * (0.5 + Math.random())));
      }
    }
  }

  return {
    name: "warren",
    buildMs,
    get retries() {
      return retries;
    },
    createPython: () => create(),
    createRepo: () => create(REPO_TEMPLATE),
    async fork(box, n) {
      const children = await (box as WarrenBox).sandbox.fork({
        count: n,
        requestTimeoutMs: REQUEST_TIMEOUT_MS,
      });
      const failed = children.find((c) => c instanceof Error);
      if (failed) {
        await Promise.all(children.map((c) => (c instanceof Error ? undefined : c.kill())));
        throw failed;
      }
      return (children as CodeSandbox[]).map((c) => new WarrenBox(c));
    },
    async snapshot(box) {
      const info = await (box as WarrenBox).sandbox.createSnapshot({
        requestTimeoutMs: REQUEST_TIMEOUT_MS,
      });
      return info.snapshotId;
    },
    fromSnapshot: (ref) => create(ref),
  };
}
