import { randomBytes } from "node:crypto";
import { request } from "node:http";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Filesystem } from "../protocol/gen/filesystem/filesystem_pb.js";
import { Process } from "../protocol/gen/process/process_pb.js";
import {
  ENVD_PORT,
  type EnvdInitRequest,
  type EnvdMetrics,
  INIT_SEED_BYTES,
} from "../protocol/index.js";
import { WarrenError } from "../shared/index.js";
import type { GuestAgent, InitOptions } from "./guest-agent.js";

interface Multipart {
  readonly contentType: string;
  readonly body: string;
}

interface Reply {
  readonly status: number;
  readonly body: string;
}

/**
 * One HTTP exchange on a connection of its own (`agent: false`): a slot's address is reused
 * by the next sandbox, and a pooled connection to a gone guest would be reset.
 */
function exchange(
  host: string,
  method: string,
  path: string,
  options: { body?: unknown; form?: Multipart; token?: string; timeoutMs: number },
): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const payload =
      options.form?.body ?? (options.body === undefined ? undefined : JSON.stringify(options.body));
    const contentType = options.form?.contentType ?? "application/json";
    const req = request(
      {
        host,
        port: ENVD_PORT,
        method,
        path,
        agent: false,
        timeout: options.timeoutMs,
        headers: {
          ...(payload ? { "content-type": contentType } : {}),
          ...(options.token ? { "x-access-token": options.token } : {}),
        },
      },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (chunk: string) => {
          body += chunk;
        });
        res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
        res.on("error", reject);
      },
    );
    req.on("timeout", () =>
      req.destroy(new Error(`envd ${path}: no answer in ${options.timeoutMs} ms`)),
    );
    req.on("error", reject);
    req.end(payload);
  });
}

/**
 * One /init attempt's body: `body`, fresh random bytes for the guest's kernel (every VM
 * restored from one snapshot starts with its siblings' random state), and when `stamped` the
 * host's time.
 */
export function initAttempt(body: EnvdInitRequest, stamped: boolean): EnvdInitRequest {
  return {
    ...body,
    seed: randomBytes(INIT_SEED_BYTES).toString("base64"),
    ...(stamped && { timestamp: new Date().toISOString() }),
  };
}

/**
 * POST /init until envd answers, as E2B's orchestrator does after every start and resume:
 * the sandbox is usable once it returns. A refused connection is retried every 5 ms; a
 * connection that was accepted is given the whole deadline to answer (when many guests
 * start at once on few cores, aborting slow answers would only start the work again).
 * `stamped` (default true) sends the host's time, which envd sets its clock to and orders
 * /inits by. Every attempt carries a seed of its own (`initAttempt`).
 */
async function initEnvd(host: string, body: EnvdInitRequest, options: InitOptions): Promise<void> {
  const deadline = performance.now() + options.deadlineMs;
  let lastError = "no attempt";
  for (;;) {
    options.signal?.throwIfAborted();
    const remainingMs = Math.round(deadline - performance.now());
    if (remainingMs <= 0) break;
    try {
      const reply = await exchange(host, "POST", "/init", {
        body: initAttempt(body, options.stamped !== false),
        token: options.token,
        timeoutMs: remainingMs,
      });
      if (reply.status === 204) return;
      // An answer other than 204 will not change by retrying (bad token, bad body).
      throw new WarrenError("internal", `envd refused /init: ${reply.status} ${reply.body}`);
    } catch (err) {
      if (err instanceof WarrenError) throw err;
      lastError = err instanceof Error ? err.message : String(err);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  throw new WarrenError(
    "internal",
    `envd did not answer within ${options.deadlineMs} ms (${lastError})`,
  );
}

/** GET /metrics from a running sandbox's envd. */
async function readEnvdMetrics(host: string, token?: string): Promise<EnvdMetrics> {
  const reply = await exchange(host, "GET", "/metrics", { token, timeoutMs: 5_000 });
  if (reply.status !== 200) {
    throw new WarrenError("internal", `envd /metrics answered ${reply.status}: ${reply.body}`);
  }
  return JSON.parse(reply.body) as EnvdMetrics;
}

/** Polls GET /health until envd answers 204 (a cold boot); fails early if the VMM exits. */
async function waitForHealth(
  host: string,
  options: { deadlineMs: number; exited?: Promise<unknown> },
): Promise<void> {
  let gone = false;
  void options.exited?.then(() => {
    gone = true;
  });
  const deadline = performance.now() + options.deadlineMs;
  while (performance.now() < deadline) {
    if (gone) throw new WarrenError("internal", "the VM exited before envd answered");
    const reply = await exchange(host, "GET", "/health", { timeoutMs: 2_000 }).catch(
      () => undefined,
    );
    if (reply?.status === 204) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new WarrenError("internal", `envd did not become healthy within ${options.deadlineMs} ms`);
}

const EXERCISE_FILE = "/tmp/.warren-exercise";
const EXERCISE_BOUNDARY = "warren-exercise";

/**
 * Walks envd's hot paths once, as a client's first calls would: /init, a file written, read
 * and listed, a login shell. V8 compiles each JavaScript
 * function on its first call; under TCG that runs its parser through translation, ~1.5 s of
 * a first command. Done before the template is captured, every sandbox starts with those
 * functions compiled; done in a pooled VMM, its QEMU has the code translated as well. The
 * shell removes the file and runs `sync`: what the walk dirtied is written now, not by the
 * guest's flusher right after a create.
 */
async function exerciseEnvd(host: string, token?: string): Promise<void> {
  // Unstamped: envd would otherwise ignore every /init stamped earlier than this one, and a
  // template lives on while the host clock may be stepped back.
  await initEnvd(host, {}, { deadlineMs: 30_000, stamped: false, token });
  const query = `?path=${encodeURIComponent(EXERCISE_FILE)}&username=user`;
  const form: Multipart = {
    contentType: `multipart/form-data; boundary=${EXERCISE_BOUNDARY}`,
    body: [
      `--${EXERCISE_BOUNDARY}`,
      'content-disposition: form-data; name="file"; filename="exercise"',
      "content-type: application/octet-stream",
      "",
      "warren",
      `--${EXERCISE_BOUNDARY}--`,
      "",
    ].join("\r\n"),
  };
  for (const [method, options] of [
    ["POST", { form }],
    ["GET", {}],
  ] as const) {
    const reply = await exchange(host, method, `/files${query}`, {
      ...options,
      token,
      timeoutMs: 30_000,
    });
    if (reply.status >= 300)
      throw new WarrenError(
        "internal",
        `envd ${method} /files answered ${reply.status}: ${reply.body}`,
      );
  }
  // As the e2b SDK calls: JSON messages, keepalive pings asked for.
  const transport = createConnectTransport({
    baseUrl: `http://${host}:${ENVD_PORT}`,
    httpVersion: "1.1",
    useBinaryFormat: false,
  });
  const headers = {
    authorization: `Basic ${Buffer.from("user:").toString("base64")}`,
    "keepalive-ping-interval": "50",
    ...(token && { "x-access-token": token }),
  };
  await createClient(Filesystem, transport).listDir(
    { path: "/tmp", depth: 1 },
    { headers, timeoutMs: 30_000 },
  );
  const stream = createClient(Process, transport).start(
    {
      // bash as the SDK runs commands, where the image has it (an Alpine image may not).
      process: {
        cmd: "/bin/sh",
        args: [
          "-c",
          'if [ -x /bin/bash ]; then exec /bin/bash -l -c "$0"; fi; exec /bin/sh -c "$0"',
          `rm -f ${EXERCISE_FILE}; sync`,
        ],
      },
      stdin: false,
    },
    { headers, timeoutMs: 60_000 },
  );
  for await (const _event of stream) {
    // Drained until the process ends.
  }
}

/** The real guest agent client: envd over HTTP and Connect, a connection per exchange. */
export class EnvdClient implements GuestAgent {
  init(host: string, body: EnvdInitRequest, options: InitOptions): Promise<void> {
    return initEnvd(host, body, options);
  }
  waitForHealth(host: string, options: { deadlineMs: number; exited?: Promise<unknown> }) {
    return waitForHealth(host, options);
  }
  exercise(host: string, token?: string): Promise<void> {
    return exerciseEnvd(host, token);
  }
  metrics(host: string, token?: string): Promise<EnvdMetrics> {
    return readEnvdMetrics(host, token);
  }
}
