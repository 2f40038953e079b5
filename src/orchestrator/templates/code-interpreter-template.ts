import type { TemplateRow } from "../../catalog/index.js";
import { INTERPRETER_PORT } from "../../protocol/index.js";
import { WarrenError } from "../../shared/index.js";
import type { BuiltinTemplate } from "./base-template.js";

/** The template `@e2b/code-interpreter`'s `Sandbox.create()` asks for. */
export const CODE_INTERPRETER_TEMPLATE = "code-interpreter-v1";

/** Kernels start with IPython, numpy, pandas and matplotlib imported: minutes under TCG, at worst. */
const KERNELS_READY_MS = 600_000;
/** The warm-up, whole (its first run translates the kernels' paths under TCG). */
const WARM_UP_MS = 120_000;
/** What the template's guest may send back to one call. */
const MAX_REPLY_BYTES = 1024 * 1024;

/** The built-in code-interpreter-v1 template's row (a snapshot of it is the user's). */
export function isCodeInterpreter(template: TemplateRow): boolean {
  return template.kind === "base" && template.aliases.includes(CODE_INTERPRETER_TEMPLATE);
}

/**
 * The code-interpreter-v1 template: its rootfs booted, envd's code interpreter up with its
 * default python and javascript contexts, each run once silently, then captured: a sandbox's
 * first `runCode` finds its kernel started and its modules imported.
 */
export function codeInterpreterTemplate(rootfs: { path: string; sha256: string }): BuiltinTemplate {
  return {
    alias: CODE_INTERPRETER_TEMPLATE,
    rootfs: rootfs.path,
    rootfsSha256: rootfs.sha256,
    prepare: warmKernels,
  };
}

async function warmKernels(host: string): Promise<void> {
  const base = `http://${host}:${INTERPRETER_PORT}`;
  const deadline = Date.now() + KERNELS_READY_MS;
  for (;;) {
    const health = await call(`${base}/health`, { method: "GET" }, 5_000).catch(() => undefined);
    if (health?.status === 200) break;
    if (health && health.status !== 503)
      throw new WarrenError(
        "guest_unavailable",
        `the code interpreter's kernels did not start: ${health.status} ${health.body}`,
      );
    if (Date.now() > deadline)
      throw new WarrenError(
        "guest_unavailable",
        `the code interpreter's kernels were not ready within ${KERNELS_READY_MS / 1000} s`,
      );
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  await warmInterpreter(host);
}

/**
 * Runs a silent `1 + 1` in the guest's default python and javascript contexts (envd's
 * `/warm`): under TCG the first run after a restore translates the kernels' paths, which
 * this moves off the user's first `runCode`; execution counts do not move.
 */
export async function warmInterpreter(host: string, signal?: AbortSignal): Promise<void> {
  const warmed = await call(
    `http://${host}:${INTERPRETER_PORT}/warm`,
    { method: "POST", ...(signal && { signal }) },
    WARM_UP_MS,
  );
  if (warmed.status !== 204)
    throw new WarrenError(
      "guest_unavailable",
      `the code interpreter's warm-up answered ${warmed.status}: ${warmed.body.slice(0, 500)}`,
    );
}

/** One bounded call to the template's guest: its status and at most MAX_REPLY_BYTES of body. */
async function call(
  url: string,
  init: RequestInit,
  timeoutMs: number,
): Promise<{ status: number; body: string }> {
  const timeout = AbortSignal.timeout(timeoutMs);
  const signal = init.signal ? AbortSignal.any([init.signal, timeout]) : timeout;
  const res = await fetch(url, { ...init, signal });
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of res.body ?? []) {
    size += chunk.length;
    if (size > MAX_REPLY_BYTES) break;
    chunks.push(chunk);
  }
  return { status: res.status, body: Buffer.concat(chunks).toString("utf8") };
}
