/**
 * The envd version Warren's agent reports. The E2B SDK gates features on this string
 * (recursive watch 0.1.4, stdin control 0.3.0, default user 0.4.0, closeStdin 0.5.2,
 * octet-stream upload 0.5.7, file metadata 0.6.2, watch entries 0.6.3, network-mount
 * watch 0.6.4): the agent implements all of them, so it claims 0.6.4 and no more.
 */
export const ENVD_VERSION = "0.6.4";

/**
 * /init's answer says where its time went, step by step (`parse=0.4,trust=12.1,…`, ms): the
 * server's create split shows them as `guest.init.<step>` (bounded: a guest could say
 * anything).
 */
export const ENVD_INIT_STEPS_HEADER = "x-warren-init-steps";
/** The steps /init times, in order. */
export const ENVD_INIT_STEPS = ["parse", "seed", "clock", "trust", "mounts"] as const;

/** Port envd listens on inside every sandbox. */
export const ENVD_PORT = 49983;

/** Where Warren's own internal envd routes live (refused from outside, as E2B's are). */
export const ENVD_WARREN_PREFIX = "/_warren";

/**
 * An Upgrade (`Upgrade: warren-tunnel`) to `<path>/<port>` connects the node's proxy to a
 * server bound to the guest's loopback (127.0.0.1, then ::1), which the guest's own address
 * does not reach. Token required.
 */
export const LOOPBACK_TUNNEL_PATH = `${ENVD_WARREN_PREFIX}/loopback`;

/** `GET <path>?after=<seq>`: envd's own log lines after `seq` (JSON, at most 1 000). Token required. */
export const ENVD_LOGS_PATH = `${ENVD_WARREN_PREFIX}/logs`;
export const LOOPBACK_TUNNEL_PROTOCOL = "warren-tunnel";

/** Paths only the orchestrator may call; the sandbox proxy refuses them from outside. */
export const ENVD_INTERNAL_PATHS = [
  "/init",
  "/freeze",
  "/unfreeze",
  "/fsfreeze",
  "/fsthaw",
  "/collapse",
  "/upgrade",
  ENVD_WARREN_PREFIX,
] as const;

/** Body of envd's `POST /init`, as E2B's orchestrator sends it. */
export interface EnvdInitRequest {
  envVars?: Record<string, string>;
  accessToken?: string;
  defaultUser?: string;
  defaultWorkdir?: string;
  /** RFC 3339 time on the host when the request was made. */
  timestamp?: string;
  /**
   * Warren's own field (E2B's envd has none): INIT_SEED_BYTES fresh random bytes from the host,
   * base64. Every guest restored or forked from one snapshot wakes with its siblings' kernel
   * RNG state; envd mixes this into the kernel's pool and forces a reseed (docs/guest-boot.md).
   */
  seed?: string;
  /**
   * NFS exports to mount (E2B's field): `nfs_target` is `<IPv4 address>:/<export>`, `path`
   * absolute. envd mounts each one not mounted already (a resumed or forked guest's mounts
   * carry on) with the options in src/agent/volume-mounts.ts.
   */
  volumeMounts?: EnvdVolumeMount[];
  /**
   * Warren's own field: CA certificates (PEM) the guest trusts from now on — the node's egress
   * CA, which the egress gate's certificates for network.rules domains chain to. envd adds
   * them to the system trust store and points Node and Python's requests at it.
   */
  caCertificates?: string;
}

export interface EnvdVolumeMount {
  nfs_target: string;
  path: string;
}

/** Size of `/init`'s `seed`: 256 bits, what the kernel's CRNG needs to count as seeded. */
export const INIT_SEED_BYTES = 32;

/** Body of envd's `GET /metrics`. */
export interface EnvdMetrics {
  ts: number;
  cpu_count: number;
  cpu_used_pct: number;
  mem_total: number;
  mem_used: number;
  mem_cache: number;
  mem_total_mib: number;
  mem_used_mib: number;
  disk_used: number;
  disk_total: number;
}

/** Port of E2B's code interpreter inside a sandbox (the SDK's JUPYTER_PORT), served by envd. */
export const INTERPRETER_PORT = 49999;

/**
 * A rootfs holding this file gets the code interpreter: envd serves it beside itself (the
 * `code-interpreter-v1` template's rootfs has it, and so every template made from that one).
 */
export const CODE_INTERPRETER_MARKER = "/etc/warren/code-interpreter";
