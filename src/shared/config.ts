import { availableParallelism, hostname, totalmem } from "node:os";
import { WarrenError } from "./errors.js";

/**
 * Every server setting in one table: key, environment variable, default, check, and a
 * one-line doc. `loadConfig` reads the environment (then explicit overrides), validates
 * every value naming the variable, and freezes the result.
 */
interface Setting<T> {
  readonly env: string;
  readonly doc: string;
  readonly default: () => T;
  readonly parse: (text: string) => T | undefined;
  /** What a valid value looks like, for the error message. */
  readonly expects: string;
  /** A secret: what the logs show instead of the value (a method: checked bivariantly). */
  redact?(value: T): unknown;
}

const int =
  (min: number, max = Number.MAX_SAFE_INTEGER) =>
  (text: string) => {
    const value = Number(text);
    return Number.isInteger(value) && value >= min && value <= max ? value : undefined;
  };
const num = (min: number) => (text: string) => {
  const value = Number(text);
  return Number.isFinite(value) && value >= min ? value : undefined;
};
const str = (text: string) => (text.trim() === "" ? undefined : text.trim());
const oneOf =
  <T extends string>(...values: T[]) =>
  (text: string) =>
    values.includes(text as T) ? (text as T) : undefined;
/** An IPv4 block "a.b.c.d/p" with p from 8 to 30 (the network component checks it again). */
const ipv4Block = (text: string) => {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text.trim());
  if (!match) return undefined;
  const [octets, prefix] = [match.slice(1, 5).map(Number), Number(match[5])];
  return octets.every((o) => o <= 255) && prefix >= 8 && prefix <= 30 ? text.trim() : undefined;
};
const absolutePath = (text: string) => (text.trim().startsWith("/") ? text.trim() : undefined);
/** A DNS name of two labels or more (letters, digits, hyphens). */
const DOMAIN =
  /^(?=.{1,253}$)(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const list = (text: string) =>
  text
    .split(",")
    .map((item) => item.trim())
    .filter((item) => item !== "");

const HOST_PORT = /^(?:[\w.-]+|\[[0-9a-fA-F:]+\])(?::\d{1,5})?$/;
/** `docker.io=http://127.0.0.1:5000,ghcr.io=https://m.example`: registry → mirror base URL. */
const registryMirrors = (text: string) => {
  const mirrors: Record<string, string> = {};
  for (const entry of list(text)) {
    const eq = entry.indexOf("=");
    const [registry, url] = [entry.slice(0, eq).trim(), entry.slice(eq + 1).trim()];
    if (eq <= 0 || !HOST_PORT.test(registry) || !/^https?:\/\/[^/\s]+\S*$/.test(url)) {
      return undefined;
    }
    mirrors[registry] = url;
  }
  return mirrors;
};
/** `127.0.0.1:5000, registry.lan`: hosts with an optional port. */
const hostList = (text: string) => {
  const hosts = list(text);
  return hosts.every((host) => HOST_PORT.test(host)) ? hosts : undefined;
};

const SETTINGS = {
  host: {
    env: "WARREN_HOST",
    doc: "Address the server listens on (API and sandbox proxy).",
    default: () => "127.0.0.1",
    parse: str,
    expects: "an address",
  },
  port: {
    env: "WARREN_PORT",
    doc: "Port of the API and the sandbox proxy.",
    default: () => 3000,
    parse: int(0, 65_535),
    expects: "an integer 0..65535",
  },
  dataDir: {
    env: "WARREN_HOME",
    doc: "Data directory: images, catalog, snapshots, sandboxes, secrets.",
    default: () => "/var/lib/warren",
    parse: str,
    expects: "a path",
  },
  imagesDir: {
    env: "WARREN_IMAGES_DIR",
    doc: "Guest images (kernel, initramfs, agent drive, base rootfs) and their build cache, built by the host setup; unset: <data dir>/images.",
    default: (): string | undefined => undefined,
    parse: str,
    expects: "a path",
  },
  volumesDir: {
    env: "WARREN_VOLUMES_DIR",
    doc: "Where volumes' files live, one directory each (kept 0700, root's); unset: <data dir>/volumes. In a cluster, storage every node reaches at the same path.",
    default: (): string | undefined => undefined,
    parse: str,
    expects: "a path",
  },
  accel: {
    env: "WARREN_ACCEL",
    doc: "Accelerator: kvm, tcg, or auto (probe once per host by booting a guest).",
    default: () => "auto" as const,
    parse: oneOf("auto", "kvm", "tcg"),
    expects: "auto, kvm or tcg",
  },
  apiKeys: {
    env: "WARREN_API_KEYS",
    doc: "Extra API keys (comma-separated), accepted besides <data dir>/secrets/api-key.",
    default: (): string[] => [],
    parse: list,
    expects: "a comma-separated list",
    redact: (keys: string[]) => `${keys.length} extra`,
  },
  adminToken: {
    env: "WARREN_ADMIN_TOKEN",
    doc: "The admin token (X-Admin-Token), instead of <data dir>/secrets/admin-token. A cluster's nodes and gateways must share one: the gateway passes the admin's requests to the nodes.",
    default: (): string | undefined => undefined,
    parse: (text: string) => {
      if (text.trim().length < 16) throw new Error("must be at least 16 characters");
      return text.trim();
    },
    expects: "a secret of at least 16 characters",
    redact: (token: string | undefined) => (token === undefined ? undefined : "(set)"),
  },
  domain: {
    env: "WARREN_DOMAIN",
    doc: "Domain mode (docs/domains.md): the SDK's E2B_DOMAIN. Warren then also serves HTTPS on WARREN_TLS_PORT for api.<domain> (the API) and <port>-<id>.<domain> (sandbox ports), and create/connect answers carry it as `domain`.",
    default: (): string | undefined => undefined,
    parse: (text: string) => {
      const domain = text.trim().toLowerCase().replace(/\.$/, "");
      return DOMAIN.test(domain) ? domain : undefined;
    },
    expects: "a domain name such as sandbox.example.com",
  },
  tlsPort: {
    env: "WARREN_TLS_PORT",
    doc: "Domain mode: the HTTPS port (0: any free port), or off when TLS is terminated in front of Warren (which then gets plain HTTP on WARREN_PORT with the same Host names).",
    default: (): number | "off" => 443,
    parse: (text: string) => (text.trim() === "off" ? ("off" as const) : int(0, 65_535)(text)),
    expects: "a port from 0 to 65535, or off",
  },
  tlsCert: {
    env: "WARREN_TLS_CERT",
    doc: "Domain mode: the operator's certificate (PEM, chain included) covering *.<domain>, with WARREN_TLS_KEY; reloaded when the files change. Unset: Warren's own local CA (<data dir>/tls/ca.crt) issues one and renews it.",
    default: (): string | undefined => undefined,
    parse: absolutePath,
    expects: "an absolute path",
  },
  tlsKey: {
    env: "WARREN_TLS_KEY",
    doc: "Domain mode: the private key (PEM) of WARREN_TLS_CERT.",
    default: (): string | undefined => undefined,
    parse: absolutePath,
    expects: "an absolute path",
  },
  metricsIntervalMs: {
    env: "WARREN_METRICS_INTERVAL_MS",
    doc: "How often every running sandbox's metrics are sampled in the background (kept per sandbox, the last 1000), so getMetrics over a past window has data; 0: only when asked. Each sample is one envd request, except for a guest whose VMM used under 1% of a CPU since its last sample: it is not woken (under TCG answering costs more than idling), its last memory and disk figures are repeated with the VMM's own CPU use, and it is asked again at least every sixth interval.",
    default: () => 10_000,
    parse: int(0),
    expects: "milliseconds ≥ 0",
  },
  proxyIdleTimeoutMs: {
    env: "WARREN_PROXY_IDLE_TIMEOUT_MS",
    doc: "Sandbox proxy: an exchange with a sandbox's port with no bytes either way for this long is cut (504 before a response), and idle pooled connections are closed.",
    default: () => 620_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  proxyHeadTimeoutMs: {
    env: "WARREN_PROXY_HEAD_TIMEOUT_MS",
    doc: "Sandbox proxy: longest a sandbox's server may take to send a whole response head after the request's last byte (504 past it), however it trickles it.",
    default: () => 620_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  maxSandboxes: {
    env: "WARREN_MAX_SANDBOXES",
    doc: "Most sandboxes running (or starting) at once on this node.",
    default: () => 200,
    parse: int(1),
    expects: "a positive integer",
  },
  vcpuOvercommit: {
    env: "WARREN_VCPU_OVERCOMMIT",
    doc: "Guest vCPUs allowed per host CPU (idle guests cost little CPU: see bench/).",
    default: () => 160,
    parse: num(0.1),
    expects: "a number ≥ 0.1",
  },
  memoryOvercommit: {
    env: "WARREN_MEMORY_OVERCOMMIT",
    doc: "Guest memory allowed as a multiple of host RAM (idle guests touch little of theirs).",
    default: () => 8,
    parse: num(0.1),
    expects: "a number ≥ 0.1",
  },
  vmmUidBase: {
    env: "WARREN_VMM_UID_BASE",
    doc: "First uid (and gid) of the range VMMs run as, one of its own per running VM (QEMU drops root for it and chroots into its runtime directory). The range must be unused on the host: no account or file may own these ids.",
    default: () => 1_500_000_000,
    parse: int(1000),
    expects: "an integer ≥ 1000",
  },
  guestIdBase: {
    env: "WARREN_GUEST_ID_BASE",
    doc: "First host uid (and gid) of the 65 536 the guest services process's user namespace maps its own 0-65535 to: it serves guests' NFS (and the egress gate) as that namespace's root, so its reach on the host is what these ids own. A guest's uid u owns volume files as this + u on the host (volumes made before are moved over at start). The range must be unused on the host, and not overlap WARREN_VMM_UID_BASE's.",
    default: () => 1_400_000_000,
    parse: int(65_536),
    expects: "an integer ≥ 65536",
  },
  guestServicesMemoryMiB: {
    env: "WARREN_GUEST_SERVICES_MEMORY_MIB",
    doc: "Memory the guest services process (NFS for volumes, the egress gate) may use, in its cgroup: past it the kernel kills it and the server starts it again, its sandboxes' NFS and egress pausing for a moment.",
    default: () => 512,
    parse: int(64),
    expects: "an integer ≥ 64 (MiB)",
  },
  keeper: {
    env: "WARREN_KEEPER",
    doc: "Who starts the VMM keeper, the small root process that spawns and holds every QEMU so that the server can be killed or upgraded and re-adopt its running sandboxes (its own death kills every VMM): auto starts one at <data>/keeper when none answers, which exits once it holds no VM and no server is connected for 5 s; external waits for one a supervisor runs (dist/keeper/main.mjs, deploy/systemd/warren-keeper.service).",
    default: (): "auto" | "external" => "auto",
    parse: oneOf("auto", "external"),
    expects: "auto or external",
  },
  onStop: {
    env: "WARREN_ON_STOP",
    doc: "What a clean stop (SIGTERM, SIGINT) does with running sandboxes: pause captures each one (it resumes on its next connect, whichever server); detach leaves them running in the keeper, their TTLs and network as they were, for the next server on this data dir to re-adopt (an upgrade: stop, new code, start). SIGUSR2 stops with detach whatever this says.",
    default: (): "pause" | "detach" => "pause",
    parse: oneOf("pause", "detach"),
    expects: "pause or detach",
  },
  vmmUidCount: {
    env: "WARREN_VMM_UID_COUNT",
    doc: "How many uids the VMM range holds: at most this many VMs (sandboxes, warm VMMs, build VMs) run at once.",
    default: () => 65_536,
    parse: int(16),
    expects: "an integer ≥ 16",
  },
  memoryReserveMiB: {
    env: "WARREN_MEMORY_RESERVE_MIB",
    doc: "Host memory (MemAvailable) no new VM may eat into: below it plus a VMM's start-up need, creates, resumes and forks get 429 memory_pressure instead of the host running out. 0 turns the check off.",
    default: () => 1_024,
    parse: int(0),
    expects: "a non-negative integer (MiB)",
  },
  diskReserveMiB: {
    env: "WARREN_DISK_RESERVE_MIB",
    doc: "Free disk in the data dir's filesystem that nothing new may eat into: a create (or fork child), a template build's start or a file upload that would leave less is refused with 507 disk_pressure. Volume writes keep it free on the volumes' filesystem (WARREN_VOLUMES_DIR's) too: a guest's write to a mounted volume gets ENOSPC, the volume content API 507 disk_pressure. A template's disk (minFreeDiskMb) may be at most the filesystem's size less this. 0 turns the check off.",
    default: () => 2_048,
    parse: int(0),
    expects: "a non-negative integer (MiB)",
  },
  templateVcpus: {
    env: "WARREN_TEMPLATE_VCPUS",
    doc: "vCPUs of the built-in base template (E2B's has 2; under TCG each vCPU is one more host thread on the same cores).",
    default: () => 1,
    parse: int(1, 64),
    expects: "an integer 1..64",
  },
  templateMemoryMiB: {
    env: "WARREN_TEMPLATE_MEMORY_MIB",
    doc: "Memory of the built-in base template, MiB.",
    default: () => 512,
    parse: int(128, 65_536),
    expects: "an integer 128..65536",
  },
  defaultTimeoutMs: {
    env: "WARREN_DEFAULT_TIMEOUT_MS",
    doc: "TTL of a sandbox created or resumed without a timeout.",
    default: () => 300_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  maxTimeoutMs: {
    env: "WARREN_MAX_TIMEOUT_MS",
    doc: "Longest TTL a client may ask for.",
    default: () => 86_400_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  killedRetentionMs: {
    env: "WARREN_KILLED_RETENTION_MS",
    doc: "How long a killed sandbox's env vars and access tokens stay in the catalog after the kill (0: until the next sweep). Swept at start and every retention (1 min to 1 h apart); the row itself stays, as its history, and so does the envd token of a sandbox a snapshot was taken of (creates from the snapshot need it).",
    default: () => 86_400_000,
    parse: int(0),
    expects: "milliseconds ≥ 0",
  },
  eventsRetentionMs: {
    env: "WARREN_EVENTS_RETENTION_MS",
    doc: "How long sandboxes' lifecycle events (GET /events/sandboxes, webhooks) and their history (GET /sandboxes/{id}/logs' lifecycle entries) are kept. E2B keeps 7 days. Swept at start and every retention (1 min to 1 h apart).",
    default: () => 7 * 86_400_000,
    parse: int(60_000),
    expects: "milliseconds ≥ 60000",
  },
  maxConcurrentStarts: {
    env: "WARREN_MAX_CONCURRENT_STARTS",
    doc: "VMs brought up (restore and /init) at once; more creates, resumes and fork children queue. 0: twice the host's CPUs.",
    default: () => 0,
    parse: int(0, 1_024),
    expects: "an integer 0..1024",
  },
  startQueueDepth: {
    env: "WARREN_START_QUEUE_DEPTH",
    doc: "Creates, resumes and fork children that may wait for a VM start at once (beyond WARREN_MAX_CONCURRENT_STARTS starting); one more is refused at once with 429 start_queue_full and a Retry-After. Waiting ones start in the order they arrived.",
    default: () => 256,
    parse: int(0, 100_000),
    expects: "an integer 0..100000",
  },
  startQueueWaitMs: {
    env: "WARREN_START_QUEUE_WAIT_MS",
    doc: "Longest a create, resume or fork child may wait for its VM start: one whose wait, estimated from recent starts, would be longer is refused at once (429 start_queue_full), and one that the estimate, revised as starts progress, no longer gets through in time, or that waits this long anyway, is refused then (429 start_queue_timeout), leaving nothing behind. Keep it below clients' request timeouts (the e2b SDK's is 60 s).",
    default: () => 20_000,
    parse: int(100, 600_000),
    expects: "milliseconds 100..600000",
  },
  maxForkCount: {
    env: "WARREN_MAX_FORK_COUNT",
    doc: "Most children one fork call may ask for.",
    default: () => 16,
    parse: int(1, 256),
    expects: "an integer 1..256",
  },
  buildUploadLimitMiB: {
    env: "WARREN_BUILD_UPLOAD_LIMIT_MIB",
    doc: "Largest archive a template build's COPY step may upload.",
    default: () => 4_096,
    parse: int(1),
    expects: "a positive integer (MiB)",
  },
  buildUploadsMaxMiB: {
    env: "WARREN_BUILD_UPLOADS_MAX_MIB",
    doc: "Most disk the template build uploads (COPY archives) of one team may hold together (a team's maxUploadBytes may lower it); an upload past it is refused with 429 quota_exceeded (upload bytes). The disk reserve (WARREN_DISK_RESERVE_MIB) bounds them all.",
    default: () => 16_384,
    parse: int(1),
    expects: "a positive integer (MiB)",
  },
  buildUploadRetentionMs: {
    env: "WARREN_BUILD_UPLOAD_RETENTION_MS",
    doc: "How long an uploaded COPY archive is kept after its last use (its upload, the SDK finding it present, a build starting with it); then it is removed and the SDK uploads it again when a build needs it. Swept at start and every retention (1 min to 1 h apart); a template's delete removes its uploads at once.",
    default: () => 86_400_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  buildStepTimeoutMs: {
    env: "WARREN_BUILD_STEP_TIMEOUT_MS",
    doc: "Longest one template build step (a RUN command, a COPY) may take before the build fails.",
    default: () => 3_600_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  buildReadyTimeoutMs: {
    env: "WARREN_BUILD_READY_TIMEOUT_MS",
    doc: "Longest a template's ready check may keep failing after its start command started.",
    default: () => 300_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  tcgCacheMiB: {
    env: "WARREN_TCG_CACHE_MIB",
    doc: "Under TCG, each VM's translated-code cache. A VM that runs a while fills it with resident memory: 32 saves ~16 MiB per sandbox but, once full, the guest retranslates code it runs often (commands ~2× slower here).",
    default: () => 64,
    parse: int(4, 1_024),
    expects: "an integer 4..1024 (MiB)",
  },
  guestAslr: {
    env: "WARREN_GUEST_ASLR",
    doc: "Address-space randomization inside guests: on, off, or auto (off under TCG, whose translator retranslates every program run at new random addresses: commands ~3× slower; on under KVM). A change rebuilds the base template.",
    default: () => "auto" as const,
    parse: oneOf("auto", "on", "off"),
    expects: "auto, on or off",
  },
  codeInterpreter: {
    env: "WARREN_CODE_INTERPRETER",
    doc: "The built-in code-interpreter-v1 template (E2B's code interpreter: Python with IPython and its data stack, JavaScript, TypeScript, R, bash on port 49999): on makes setup build its rootfs (once, ~6 min: Debian packages, 3 GiB) and the server capture it after start (a cold boot with the kernels started: minutes under TCG; creates of it wait for it); off leaves both out.",
    default: (): "on" | "off" => "on",
    parse: oneOf("on", "off"),
    expects: "on or off",
  },
  ksm: {
    env: "WARREN_KSM",
    doc: "Kernel same-page merging across VMMs: on starts the host's KSM and lets it merge identical pages of every QEMU, guest RAM included (under TCG ~25 MiB less per idle sandbox, for some ksmd CPU). Merged pages let one sandbox sense, by timing its writes, whether another holds the same page: keep it off when sandboxes of different tenants share a host.",
    default: (): "on" | "off" => "off",
    parse: oneOf("on", "off"),
    expects: "on or off",
  },
  flattenDepth: {
    env: "WARREN_FLATTEN_DEPTH",
    doc: "Frozen disk layers (pauses, fork captures) a snapshot may stand on above its template before its disk is flattened onto the template's in the background (0: never).",
    default: () => 8,
    parse: int(0, 1_000),
    expects: "an integer 0..1000",
  },
  poolSize: {
    env: "WARREN_POOL_SIZE",
    doc: "Warmed VMMs the base template keeps ready whatever the demand (0: only as many as its demand asks).",
    default: () => 2,
    parse: int(0, 64),
    expects: "an integer 0..64",
  },
  poolMaxPerTemplate: {
    env: "WARREN_POOL_MAX_PER_TEMPLATE",
    doc: "Most warmed VMMs one template's demand may keep ready: its pool holds the most creates from it that came within one refill time (1 s plus the time to warm a VMM) over the last WARREN_POOL_IDLE_MS (0: no pools but base's WARREN_POOL_SIZE).",
    default: () => 16,
    parse: int(0, 256),
    expects: "an integer 0..256",
  },
  poolMaxMemoryMiB: {
    env: "WARREN_POOL_MAX_MEMORY_MIB",
    doc: "Guest memory all warmed VMMs may hold together, MiB (their templates' memory size; they touch less). Past it the least recently created-from templates' pools shrink first.",
    default: () => 8_192,
    parse: int(0),
    expects: "a non-negative integer (MiB)",
  },
  poolIdleMs: {
    env: "WARREN_POOL_IDLE_MS",
    doc: "A template not created from for this long has its warmed VMMs given up (base down to WARREN_POOL_SIZE); also the window its demand is measured over.",
    default: () => 300_000,
    parse: int(1_000),
    expects: "milliseconds ≥ 1000",
  },
  poolMinAvailableMiB: {
    env: "WARREN_POOL_MIN_AVAILABLE_MIB",
    doc: "Below this much available host memory, pooled VMMs are given up (least recently created-from template first) and none are made.",
    default: () => 2_048,
    parse: int(0),
    expects: "a non-negative integer (MiB)",
  },
  pauseKeepMs: {
    env: "WARREN_PAUSE_KEEP_MS",
    doc: "After a pause (with memory), its VMM stays stopped this long, holding its network slot and its share of the node's capacity, so that a resume within it is a `cont` (no restore, and under TCG its translated code still warm). The snapshot is written all the same; a create or resume that needs the room takes it first (0: a pause lets its VMM go at once).",
    default: () => 30_000,
    parse: int(0, 3_600_000),
    expects: "milliseconds 0..3600000",
  },
  pauseKeepMax: {
    env: "WARREN_PAUSE_KEEP_MAX",
    doc: "Most paused sandboxes' VMMs kept stopped at once (WARREN_PAUSE_KEEP_MS); past it the longest kept goes first.",
    default: () => 16,
    parse: int(0, 1_000),
    expects: "an integer 0..1000",
  },
  slotPoolSize: {
    env: "WARREN_SLOT_POOL_SIZE",
    doc: "Network slots kept ready ahead of need.",
    default: () => 4,
    parse: int(0, 1_000),
    expects: "an integer 0..1000",
  },
  networkPrefix: {
    env: "WARREN_NETWORK_PREFIX",
    doc: "Names of this server's network slots on the host: namespaces <prefix>-<n>, host veths <prefix>v<n>, iptables rules commented <prefix>:<n> (the default keeps veths wv<n>). At start the server removes leftover slots of its own prefix only: a second server on the host needs another prefix and WARREN_NETWORK_CIDR.",
    default: () => "warren",
    // The rule of slotNamesFor (network/slot-names.ts), which checks it again.
    parse: (text: string) => (/^[a-z][a-z0-9]{1,7}$/.test(text.trim()) ? text.trim() : undefined),
    expects: "2 to 8 lowercase letters and digits, starting with a letter",
  },
  networkCidr: {
    env: "WARREN_NETWORK_CIDR",
    doc: "Private IPv4 block carved into one /31 per network slot (its size bounds the slots). It must not overlap any route of the host, nor another server's block.",
    default: () => "10.201.0.0/16",
    parse: ipv4Block,
    expects: "an IPv4 block from /8 to /30, e.g. 10.201.0.0/16",
  },
  egressResolver: {
    env: "WARREN_EGRESS_RESOLVER",
    doc: "The DNS server (IPv4[:port]) that resolves the names sandboxes' allowOut domain entries allow, for their connections and their DNS answers; unset: the host's resolver (/etc/resolv.conf).",
    default: (): string | undefined => undefined,
    parse: (text: string) =>
      /^\d{1,3}(\.\d{1,3}){3}(:\d{1,5})?$/.test(text.trim()) ? text.trim() : undefined,
    expects: "an IPv4 address with an optional port, e.g. 10.0.0.2 or 127.0.0.1:5353",
  },
  egressTrustedCa: {
    env: "WARREN_EGRESS_TRUSTED_CA",
    doc: "A PEM file of CA certificates trusted, besides Node's own roots, for the upstream servers of sandboxes' network.rules domains (whose HTTPS the egress gate terminates to set headers): for an internal CA. Unset: Node's roots alone.",
    default: (): string | undefined => undefined,
    parse: (text: string) => (text.trim().startsWith("/") ? text.trim() : undefined),
    expects: "an absolute path to a PEM file",
  },
  registryMirrors: {
    env: "WARREN_REGISTRY_MIRRORS",
    doc: "Image pulls of these registries go to a mirror instead (comma-separated registry=url, e.g. docker.io=http://127.0.0.1:5000): for hosts without internet. A plain-HTTP mirror must also be listed in WARREN_INSECURE_REGISTRIES.",
    default: (): Record<string, string> => ({}),
    parse: registryMirrors,
    expects: "comma-separated registry=http(s)://host[:port] entries",
  },
  insecureRegistries: {
    env: "WARREN_INSECURE_REGISTRIES",
    doc: "Registries and mirrors (comma-separated host[:port]) that image pulls may reach over plain HTTP (and on any address, as WARREN_PRIVATE_REGISTRIES).",
    default: (): string[] => [],
    parse: hostList,
    expects: "comma-separated host[:port] entries",
  },
  privateRegistries: {
    env: "WARREN_PRIVATE_REGISTRIES",
    doc: "Registries (comma-separated host[:port]) that image pulls may reach on loopback, private or link-local addresses, e.g. a registry on the LAN. Any other registry named in fromImage, and every token realm and redirect, must resolve to public addresses (over HTTPS); mirrors and insecure registries are allowed anywhere.",
    default: (): string[] => [],
    parse: hostList,
    expects: "comma-separated host[:port] entries",
  },
  webhookPrivateHosts: {
    env: "WARREN_WEBHOOK_PRIVATE_HOSTS",
    doc: "Webhook receivers (comma-separated host[:port]) that deliveries may reach on loopback, private or link-local addresses, e.g. a receiver on the LAN. Any other webhook URL must resolve to public addresses; no redirect is followed.",
    default: (): string[] => [],
    parse: hostList,
    expects: "comma-separated host[:port] entries",
  },
  databaseUrl: {
    env: "WARREN_DATABASE_URL",
    doc: "Cluster: the PostgreSQL catalog every node and gateway shares (postgres://user:password@host:5432/warren). Unset: this node keeps its own SQLite catalog and is no cluster's member.",
    default: (): string | undefined => undefined,
    parse: (text: string) =>
      /^postgres(?:ql)?:\/\/\S+$/.test(text.trim()) ? text.trim() : undefined,
    expects: "a postgres:// or postgresql:// URL",
    redact: (url: string | undefined) => url?.replace(/\/\/([^:/@]*):[^@]*@/, "//$1:***@"),
  },
  nodeId: {
    env: "WARREN_NODE_ID",
    doc: "Cluster: this node's name, unique in the cluster (default: the host name).",
    default: (): string => hostname().toLowerCase(),
    parse: (text: string) =>
      /^[a-z0-9][a-z0-9.-]{0,62}$/.test(text.trim()) ? text.trim() : undefined,
    expects: "lowercase letters, digits, '.' and '-' (up to 63)",
  },
  nodeUrl: {
    env: "WARREN_NODE_URL",
    doc: "Cluster: the URL gateways reach this node's cluster port at, https://<address>:<WARREN_CLUSTER_PORT> (default: https://WARREN_CLUSTER_HOST:WARREN_CLUSTER_PORT, which must then be an address other hosts can reach).",
    default: (): string | undefined => undefined,
    parse: (text: string) =>
      /^https:\/\/[^/\s]+\/?$/.test(text.trim()) ? text.trim().replace(/\/$/, "") : undefined,
    expects: "an https://host:port URL (gateways reach nodes over the cluster's TLS only)",
  },
  clusterHost: {
    env: "WARREN_CLUSTER_HOST",
    doc: "Cluster: the address a node's cluster port listens on (the gateways' way in: TLS, a gateway's certificate from the cluster CA required).",
    default: () => "0.0.0.0",
    parse: str,
    expects: "an address",
  },
  clusterPort: {
    env: "WARREN_CLUSTER_PORT",
    doc: "Cluster: a node's cluster port, where gateways reach its API, its sandbox proxy and its internal node API over mutual TLS.",
    default: () => 3443,
    parse: int(0, 65_535),
    expects: "an integer 0..65535",
  },
  clusterTlsDir: {
    env: "WARREN_CLUSTER_TLS_DIR",
    doc: "Cluster: the directory of this member's cluster credentials, from `warren cluster issue`: ca.crt (the cluster CA) and node.crt + node.key on a node, gateway.crt + gateway.key on a gateway. Never the CA's key.",
    default: () => "/etc/warren/cluster",
    parse: absolutePath,
    expects: "an absolute path",
  },
  heartbeatMs: {
    env: "WARREN_HEARTBEAT_MS",
    doc: "Cluster: how often a node reports its load to the catalog.",
    default: () => 2_000,
    parse: int(100),
    expects: "milliseconds ≥ 100",
  },
  sharedStore: {
    env: "WARREN_SHARED_STORE",
    doc: "Cluster: where nodes publish paused sandboxes' and templates' snapshots so another node can resume them: a path every node mounts (/mnt/warren-store or file:///…) or s3://bucket/prefix. Unset: a paused sandbox resumes only on its own node.",
    default: (): string | undefined => undefined,
    parse: (text: string) =>
      /^(?:\/|file:\/\/\/|s3:\/\/[^/\s]+)\S*$/.test(text.trim()) ? text.trim() : undefined,
    expects: "an absolute path, a file:/// URL or an s3://bucket/prefix URL",
  },
  storeCacheMiB: {
    env: "WARREN_STORE_CACHE_MIB",
    doc: "Cluster: disk this node's copies of other nodes' snapshots (fetched from the shared store to resume or start from them) may take; past it, copies nothing on this node stands on go, least recently used first.",
    default: () => 20_480,
    parse: int(0),
    expects: "MiB ≥ 0",
  },
  s3Endpoint: {
    env: "WARREN_S3_ENDPOINT",
    doc: "Cluster: the S3-compatible server of an s3:// shared store (MinIO, Ceph…; path-style requests). Unset: AWS. Credentials come from the AWS SDK's default chain (AWS_ACCESS_KEY_ID, …).",
    default: (): string | undefined => undefined,
    parse: (text: string) => (/^https?:\/\/\S+$/.test(text.trim()) ? text.trim() : undefined),
    expects: "an http(s):// URL",
  },
  s3Region: {
    env: "WARREN_S3_REGION",
    doc: "Cluster: the region of an s3:// shared store.",
    default: () => "us-east-1",
    parse: (text: string) => (/^[a-z0-9-]+$/.test(text.trim()) ? text.trim() : undefined),
    expects: "a region name such as us-east-1",
  },
  nodeDownAfterMs: {
    env: "WARREN_NODE_DOWN_AFTER_MS",
    doc: "Gateway: a node silent this long is marked down and its running sandboxes reported lost.",
    default: () => 10_000,
    parse: int(500),
    expects: "milliseconds ≥ 500",
  },
  gatewayQueueWaitMs: {
    env: "WARREN_GATEWAY_QUEUE_WAIT_MS",
    doc: "Gateway: how long a create waits for a node with room before a 429.",
    default: () => 10_000,
    parse: int(0),
    expects: "milliseconds ≥ 0",
  },
  gatewayMaxQueued: {
    env: "WARREN_GATEWAY_MAX_QUEUED",
    doc: "Gateway: creates that may wait for room at once; one more is refused (429) at once.",
    default: () => 256,
    parse: int(0),
    expects: "an integer ≥ 0",
  },
  logFormat: {
    env: "WARREN_LOG_FORMAT",
    doc: "Log lines: pretty (colored, one readable line per event), json (one JSON object per line, for collectors), or auto: pretty when stdout is a terminal, json otherwise.",
    default: (): "auto" | "pretty" | "json" => "auto",
    parse: oneOf("auto", "pretty", "json"),
    expects: "auto, pretty or json",
  },
  dashboard: {
    env: "WARREN_DASHBOARD",
    doc: "The dashboard at /dashboard/ on WARREN_PORT (its files are public; what it shows needs an API key): on or off.",
    default: (): "on" | "off" => "on",
    parse: oneOf("on", "off"),
    expects: "on or off",
  },
  metricsAuth: {
    env: "WARREN_METRICS_AUTH",
    doc: "Who may scrape GET /metrics (Prometheus): admin (the admin token, as X-Admin-Token or Authorization: Bearer, which Prometheus' `authorization` sends; `api-key`, its name before teams, means the same) or none (anyone who reaches the port).",
    default: (): "admin" | "api-key" | "none" => "admin",
    parse: oneOf("admin", "api-key", "none"),
    expects: "admin or none",
  },
  logLevel: {
    env: "WARREN_LOG_LEVEL",
    doc: "pino log level.",
    default: () => "info" as const,
    parse: oneOf("trace", "debug", "info", "warn", "error", "silent"),
    expects: "trace, debug, info, warn, error or silent",
  },
} satisfies Record<string, Setting<unknown>>;

type Settings = typeof SETTINGS;
export type Config = {
  readonly [K in keyof Settings]: ReturnType<Settings[K]["default"]>;
};

/** Reads every setting from `env` (default process.env), then `overrides`; throws on a bad value. */
export function loadConfig(
  overrides: Partial<Config> = {},
  env: NodeJS.ProcessEnv = process.env,
): Readonly<Config> {
  const config: Record<string, unknown> = {};
  for (const [key, setting] of Object.entries(SETTINGS) as [string, Setting<unknown>][]) {
    const raw = env[setting.env];
    if (raw === undefined || raw === "") {
      config[key] = setting.default();
      continue;
    }
    const value = setting.parse(raw);
    if (value === undefined) {
      throw new WarrenError(
        "invalid_argument",
        `${setting.env}=${JSON.stringify(raw)} is invalid: expected ${setting.expects}`,
      );
    }
    config[key] = value;
  }
  return Object.freeze({ ...(config as Config), ...overrides });
}

/** `config` as the logs may show it: every secret setting replaced by what its `redact` says. */
export function loggableConfig(config: Readonly<Config>): Record<string, unknown> {
  const shown: Record<string, unknown> = { ...config };
  for (const [key, setting] of Object.entries(SETTINGS) as [string, Setting<unknown>][]) {
    if (setting.redact) shown[key] = setting.redact(shown[key]);
  }
  return shown;
}

/** Host capacity the overcommit ratios apply to. */
export function hostResources(): { cpus: number; memoryMiB: number } {
  return { cpus: availableParallelism(), memoryMiB: Math.floor(totalmem() / 1024 / 1024) };
}

/** Markdown table of every setting (docs/configuration.md is generated from it). */
export function describeSettings(): string {
  const rows = Object.values(SETTINGS as Record<string, Setting<unknown>>).map(
    (s) => `| \`${s.env}\` | ${JSON.stringify(s.default()) ?? "unset"} | ${s.doc} |`,
  );
  return ["| Variable | Default | Meaning |", "|---|---|---|", ...rows].join("\n");
}
