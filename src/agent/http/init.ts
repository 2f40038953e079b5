import type { IncomingMessage, ServerResponse } from "node:http";
import {
  ENVD_INIT_STEPS_HEADER,
  ENVD_VERSION,
  type EnvdInitRequest,
} from "../../protocol/index.js";
import { readBounded, WarrenError } from "../../shared/index.js";
import { ACCESS_TOKEN_HEADER, hasValidToken } from "../auth.js";
import { type ClockSetter, clockNeedsSetting } from "../clock.js";
import { type EntropySeeder, parseSeed } from "../entropy.js";
import type { AgentState } from "../state.js";
import { type InstalledTrust, parseCaCertificates, trustEnvVars } from "../trust-store.js";
import { applyVolumeMounts, parseVolumeMounts, type VolumeMounter } from "../volume-mounts.js";
import { sendEmpty } from "./respond.js";

const MAX_INIT_BYTES = 1 << 20;

async function readJson(req: IncomingMessage): Promise<unknown> {
  const body = await readBounded(req, MAX_INIT_BYTES, {
    tooLarge: () => new WarrenError("payload_too_large", "init body is larger than 1 MiB"),
  });
  const text = body.toString("utf8").trim();
  if (!text) return {};
  try {
    return JSON.parse(text);
  } catch {
    throw new WarrenError("invalid_argument", "init body is not valid JSON");
  }
}

function stringMap(value: unknown, field: string): Record<string, string> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new WarrenError("invalid_argument", `${field} must be an object of strings`);
  }
  for (const [key, v] of Object.entries(value)) {
    if (typeof v !== "string")
      throw new WarrenError("invalid_argument", `${field}.${key} must be a string`);
    // Accepted, it would make every later process start fail (execve takes C strings).
    if (key.includes("\0") || v.includes("\0"))
      throw new WarrenError("invalid_argument", `${field}.${key} contains a NUL byte`);
  }
  return value as Record<string, string>;
}

function optionalString(
  body: Record<string, unknown>,
  field: keyof EnvdInitRequest,
): string | undefined {
  const value = body[field];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "string")
    throw new WarrenError("invalid_argument", `${field} must be a string`);
  return value;
}

/** What /init may change outside envd; all only inside a guest (`--guest`). */
export interface InitHooks {
  readonly setClock: ClockSetter | undefined;
  readonly seedRandomness: EntropySeeder | undefined;
  readonly mountVolume: VolumeMounter | undefined;
  /** Adds CA certificates to the system's trust (installCaCertificates); only inside a guest. */
  readonly trustCa: ((pem: string) => Promise<InstalledTrust>) | undefined;
}

/**
 * POST /init (orchestrator only): global env vars, access token, default user and workdir,
 * host time, a random seed, NFS volumes to mount, CA certificates to trust. Once a token is set, /init must present it (header or body) to
 * change anything; an /init older than the last one applied is ignored, except for its seed.
 */
export async function handleInit(
  state: AgentState,
  hooks: InitHooks,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  const steps = new InitSteps();
  const raw = await readJson(req);
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new WarrenError("invalid_argument", "init body must be a JSON object");
  }
  const body = raw as Record<string, unknown>;
  const accessToken = optionalString(body, "accessToken");
  const timestamp = optionalString(body, "timestamp");
  const envVars =
    body.envVars === undefined || body.envVars === null
      ? undefined
      : stringMap(body.envVars, "envVars");
  const defaultUser = optionalString(body, "defaultUser");
  const defaultWorkdir = optionalString(body, "defaultWorkdir");
  const seed = parseSeed(body.seed);
  const volumeMounts = parseVolumeMounts(body.volumeMounts);
  // The ones trusted already (a pooled VMM's, installed while it was warmed) are not redone.
  const caCertificates =
    typeof body.caCertificates === "string" && body.caCertificates === state.trustedCa
      ? undefined
      : parseCaCertificates(body.caCertificates);
  if (volumeMounts?.length && !hooks.mountVolume)
    throw new WarrenError("invalid_argument", "volumeMounts: this envd runs outside a guest");

  if (state.accessToken !== undefined) {
    const presented = req.headers[ACCESS_TOKEN_HEADER] as string | undefined;
    const proven = hasValidToken(state, presented) || hasValidToken(state, accessToken);
    if (!proven) {
      throw new WarrenError(
        "unauthenticated",
        accessToken === undefined
          ? "access token reset not authorized"
          : "access token validation failed",
      );
    }
  }

  steps.done("parse");
  // Before the staleness check: fresh entropy never hurts, and a clone's must not depend on
  // the host clock never having stepped back. Outside a guest the seed is checked, then dropped.
  if (seed) {
    try {
      hooks.seedRandomness?.(seed);
    } finally {
      seed.fill(0);
    }
  }

  steps.done("seed");
  let hostMs: number | undefined;
  if (timestamp !== undefined) {
    hostMs = Date.parse(timestamp);
    if (Number.isNaN(hostMs))
      throw new WarrenError("invalid_argument", "timestamp must be an RFC 3339 time");
    if (state.lastInitMs !== undefined && hostMs <= state.lastInitMs) {
      sendEmpty(res, 204, { "X-Envd-Version": ENVD_VERSION });
      return;
    }
    state.lastInitMs = hostMs;
  }

  if (envVars) state.envVars = { ...state.envVars, ...envVars };
  if (accessToken !== undefined) state.accessToken = accessToken || undefined;
  if (defaultUser) state.defaultUser = defaultUser;
  if (defaultWorkdir) state.defaultWorkdir = defaultWorkdir;
  const clock = hostMs !== undefined && hooks.setClock && clockNeedsSetting(hostMs, Date.now());
  if (clock) hooks.setClock?.(hostMs as number);
  steps.done("clock");
  // Outside a guest the host's trust is not envd's to change: the certificates are dropped.
  const trusted = caCertificates !== undefined && hooks.trustCa !== undefined;
  if (trusted && hooks.trustCa) {
    const trust = await hooks.trustCa(caCertificates);
    state.trustedCa = body.caCertificates as string;
    // Defaults: a sandbox's own env vars (given at create) win.
    state.envVars = { ...trustEnvVars(trust), ...state.envVars };
  }
  steps.done("trust");
  // After the clock: files the guest writes to a volume get the right times from the start.
  const mounted =
    volumeMounts && hooks.mountVolume
      ? await applyVolumeMounts(volumeMounts, hooks.mountVolume)
      : 0;
  steps.done("mounts");
  state.log.record(
    "info",
    `init: ${Object.keys(envVars ?? {}).length} env vars${accessToken !== undefined ? ", access token set" : ""}${clock ? ", clock set" : ""}${trusted ? ", CA certificates trusted" : ""}${mounted ? `, ${mounted} volumes mounted` : ""} (${steps})`,
  );
  sendEmpty(res, 204, { "X-Envd-Version": ENVD_VERSION, [ENVD_INIT_STEPS_HEADER]: `${steps}` });
}

/** Each step's time since the one before, in ms: `parse=0.4,seed=0.1,…`. */
class InitSteps {
  #last = performance.now();
  readonly #ms: string[] = [];

  done(step: string): void {
    const now = performance.now();
    this.#ms.push(`${step}=${(now - this.#last).toFixed(1)}`);
    this.#last = now;
  }

  toString(): string {
    return this.#ms.join(",");
  }
}
