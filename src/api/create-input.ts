/**
 * `NewSandbox` (v1) / `NewSandboxV2` bodies → `CreateSandboxInput`, with E2B's defaults
 * and checks (infra's `sandbox_create.go`): template "base", timeout in seconds, internet
 * on, public traffic on, `allowPublicTraffic: false` only for secured sandboxes.
 */
import { posix } from "node:path";
import type {
  CreateSandboxInput,
  SandboxNetwork,
  SandboxNetworkRules,
  SandboxVolumeMount,
} from "../orchestrator/index.js";
import { checkNetworkRules } from "../orchestrator/index.js";
import { ENVD_PORT } from "../protocol/index.js";
import { WarrenError } from "../shared/index.js";
import type { ApiContext } from "./api-context.js";
import { invalid, secondsToMs } from "./input.js";
import type { NetworkConfigBody, NetworkRulesBody, NewSandboxBody } from "./schemas.js";

export const DEFAULT_TEMPLATE = "base";

export function toCreateInput(
  teamId: string,
  body: NewSandboxBody,
  version: "v1" | "v2",
  context: Pick<ApiContext, "defaultTimeoutMs" | "maxTimeoutMs">,
): CreateSandboxInput {
  rejectUnsupported(body);
  // v2 is always secured; v1 clients that omit `secure` get an open envd, as in E2B.
  const secure = version === "v2" ? true : body.secure === true;
  const onTimeout = body.autoPause === true ? "pause" : "kill";
  const autoResume = body.autoResume?.enabled === true;
  if (autoResume && onTimeout !== "pause") {
    throw invalid("body/autoResume", "needs autoPause: true (only a paused sandbox resumes)");
  }
  // A timeout pause without memory must be resumed by connect (a reboot), never by traffic.
  const keepMemory = body.autoPauseMemory !== false;
  if (!keepMemory && autoResume) {
    throw invalid(
      "body/autoPauseMemory",
      "false cannot be combined with autoResume: a filesystem-only pause is resumed by connect",
    );
  }
  const network = toNetwork(body.network);
  if (!network.allowPublicTraffic && !secure) {
    throw invalid("body/network/allowPublicTraffic", "false requires secure: true");
  }
  return {
    teamId,
    templateId: body.templateID ?? DEFAULT_TEMPLATE,
    timeoutMs:
      body.timeout === undefined
        ? context.defaultTimeoutMs
        : secondsToMs("body/timeout", body.timeout, context.maxTimeoutMs),
    metadata: { ...body.metadata },
    envVars: { ...body.envVars },
    lifecycle: { onTimeout, autoResume, ...(!keepMemory && { keepMemory }) },
    network,
    allowInternetAccess: body.allow_internet_access ?? true,
    secure,
  };
}

function toNetwork(body: NetworkConfigBody | undefined): SandboxNetwork {
  return {
    allowOut: body?.allowOut ?? [],
    denyOut: body?.denyOut ?? [],
    allowPublicTraffic: body?.allowPublicTraffic ?? true,
    ...(body?.maskRequestHost === undefined ? {} : { maskRequestHost: body.maskRequestHost }),
    ...(body?.httpsPorts?.length ? { httpsPorts: httpsPorts(body.httpsPorts) } : {}),
    ...(body?.rules && Object.keys(body.rules).length > 0 && { rules: networkRules(body.rules) }),
  };
}

/** `network.rules` with its domains in lower case (E2B normalizes them on write), checked. */
export function networkRules(rules: NetworkRulesBody): SandboxNetworkRules {
  const normalized = Object.fromEntries(
    Object.entries(rules).map(([domain, list]) => [domain.trim().toLowerCase(), list]),
  );
  checkNetworkRules(normalized);
  return normalized;
}

/**
 * Refuses (400) rules that would send a secret bound to its hosts (`allowedHosts`) toward a
 * domain they do not cover; unbound secrets go wherever rules say, as on E2B.
 */
export async function checkBoundSecrets(
  rules: SandboxNetworkRules | undefined,
  teamId: string,
  context: Pick<ApiContext, "secrets">,
  field: string,
): Promise<void> {
  const uses = rules ? checkNetworkRules(rules) : [];
  if (uses.length === 0 || !context.secrets) return;
  const secrets = context.secrets();
  for (const { domain, secret } of uses) {
    if (await secrets.mayBeSentTo(teamId, secret, domain)) continue;
    throw invalid(
      `${field}/${domain}`,
      `names secret "${secret}", which is bound to other hosts (its allowedHosts): it is never sent to ${domain}`,
    );
  }
}

/** Guest ports the proxy reaches over TLS: distinct ports, not envd's, at most 32. */
function httpsPorts(ports: readonly number[]): number[] {
  const field = "body/network/httpsPorts";
  if (ports.length > 32) throw invalid(field, "may list at most 32 ports");
  for (const port of ports) {
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw invalid(field, `${port} is not a port (1-65535)`);
    if (port === ENVD_PORT) throw invalid(field, `${ENVD_PORT} is envd's port, plain HTTP`);
  }
  return [...new Set(ports)];
}

/**
 * Features E2B has and Warren does not: refused rather than silently ignored, so a caller
 * never believes a proxy is used or a workload identity injected. (`mcp` is fine: the SDK
 * itself starts the gateway inside the sandbox.)
 */
function rejectUnsupported(body: NewSandboxBody): void {
  const unsupported = (field: string) => invalid(field, "is not supported by Warren");
  if (body.iam?.tokens !== undefined && Object.keys(body.iam.tokens).length > 0) {
    throw unsupported("body/iam/tokens");
  }
  if (body.network?.egressProxy != null) throw unsupported("body/network/egressProxy");
}

/** Mounts at most; each is a server and a mount in the guest. */
const MAX_VOLUME_MOUNTS = 16;

/**
 * The create's `volumeMounts` (`[{name, path}]`), each name one of the team's volumes: 404
 * for a name it has not (another team's volume is not there either), 400 for a bad path.
 */
export async function withVolumes(
  input: CreateSandboxInput,
  body: NewSandboxBody,
  context: Pick<ApiContext, "volumes" | "secrets">,
): Promise<CreateSandboxInput> {
  await checkBoundSecrets(input.network.rules, input.teamId, context, "body/network/rules");
  const requested = body.volumeMounts ?? [];
  if (requested.length === 0) return input;
  if (requested.length > MAX_VOLUME_MOUNTS)
    throw invalid("body/volumeMounts", `may list at most ${MAX_VOLUME_MOUNTS} volumes`);
  if (!context.volumes) throw new WarrenError("unavailable", "volumes are not served here");
  const volumes = context.volumes();
  const mounts: SandboxVolumeMount[] = [];
  for (const [i, entry] of requested.entries()) {
    const { name, path } = (entry ?? {}) as { name?: unknown; path?: unknown };
    if (typeof name !== "string" || name === "")
      throw invalid(`body/volumeMounts/${i}/name`, "must be a volume's name");
    mounts.push({
      volumeId: (await volumes.byName(input.teamId, name)).id,
      name,
      path: mountPath(`body/volumeMounts/${i}/path`, path),
    });
  }
  if (new Set(mounts.map((m) => m.path)).size !== mounts.length)
    throw invalid("body/volumeMounts", "mounts two volumes at one path");
  return { ...input, volumeMounts: mounts };
}

/** Absolute, normalized; not `/`, a system directory itself, or inside a kernel filesystem. */
function mountPath(field: string, value: unknown): string {
  if (
    typeof value !== "string" ||
    !value.startsWith("/") ||
    value.length > 1024 ||
    value.includes("\0")
  )
    throw invalid(field, "must be an absolute path");
  const path = posix.normalize(value).replace(/(.)\/$/, "$1");
  const top = path.split("/")[1] ?? "";
  if (path === "/" || SYSTEM_DIRS.has(path) || ["proc", "sys", "dev"].includes(top))
    throw invalid(field, `cannot be ${path}: a mount there would hide what the guest runs on`);
  return path;
}

const SYSTEM_DIRS = new Set(
  [
    "bin",
    "boot",
    "dev",
    "etc",
    "home",
    "lib",
    "lib64",
    "proc",
    "run",
    "sbin",
    "sys",
    "tmp",
    "usr",
    "var",
  ].map((d) => `/${d}`),
);
