// The architecture's one table: each component, what it is for, and what it may import.
// `src/dependencies.test.ts` enforces the imports; `npm run docs` writes each component's
// "May import" line and the top README's tour and floors from it, and the test fails when
// a README differs. A new arrow is a design decision: make it here, in one line.

export interface Component {
  /** The tour's line in the top README: what the component owns. */
  readonly role: string;
  /** Each component it may import, with what it takes from it ("" where the name says it). */
  readonly imports: Readonly<Record<string, string>>;
  /** The npm packages it imports (exactly: the test compares), beside Node built-ins. */
  readonly packages: readonly string[];
  /** Why a package or a limit, where it is not plain. */
  readonly note?: string;
}

/** In the tour's order: roughly bottom to top. */
export const COMPONENTS: Readonly<Record<string, Component>> = {
  protocol: {
    role: "generated protobuf code (gen/), envd constants and REST shapes; no logic",
    imports: {},
    packages: ["@bufbuild/protobuf"],
  },
  shared: {
    role: "WarrenError family (kinds and reasons), Logger, config, small helpers",
    imports: {},
    packages: ["pino-pretty"],
  },
  agent: {
    role: "envd, the in-guest agent (bundled alone onto the agent drive)",
    imports: { protocol: "", shared: "" },
    packages: [
      "@bufbuild/protobuf",
      "@connectrpc/connect",
      "@connectrpc/connect-node",
      "acorn",
      "acorn-walk",
      "busboy",
      "fs-xattr",
      "node-pty",
      "sucrase",
    ],
    note: "bundled alone onto the agent drive with its native addons",
  },
  vmm: {
    role: "VMM driver and disk-chain interfaces; the QEMU microvm driver, qcow2 chains",
    imports: { protocol: "the guest's MAC address", shared: "" },
    packages: [],
  },
  network: {
    role: "per-sandbox network namespaces, taps, NAT, egress rules, the egress gate",
    imports: {
      relay:
        "the egress gate relays a guest's HTTP requests as the proxy relays a client's: one exchange, one hop-by-hop list",
      protocol: "the guest-side addresses and MACs of `docs/guest-boot.md`",
      shared: "",
    },
    packages: ["dns-packet"],
  },
  volumes: {
    role: "E2B's volumes: rows, files reached by descriptor, the NFS server guests mount",
    imports: { catalog: "the volumes' rows", shared: "" },
    packages: [],
  },
  secrets: {
    role: "E2B's secrets: values sealed at rest, filled in at egress",
    imports: { catalog: "the sealed rows", shared: "" },
    packages: [],
  },
  tenancy: {
    role: "teams, keys, the admin token, quotas",
    imports: { catalog: "teams and keys", shared: "" },
    packages: [],
  },
  "host-setup": {
    role: "host packages and QEMU; guest kernel, initramfs, agent drive, base rootfs",
    imports: { protocol: "the code interpreter's marker and port", shared: "" },
    packages: [],
  },
  "oci-images": {
    role: "OCI/Docker images from registries flattened to ext4 rootfs (template builds)",
    imports: {
      "host-setup": "its `CommandRunner`, `makeExt4Image` and `formatDuration`, through its index",
      shared: "",
    },
    packages: ["tar", "fzstd", "@aws-sdk/client-ecr", "google-auth-library"],
    note: "`fzstd`: Node 20's zlib has no zstd; `google-auth-library` 10.x: 11.x needs Node 22",
  },
  catalog: {
    role: "SQLite (one node) / PostgreSQL (many) catalog",
    imports: { protocol: "`TeamLimits`, the teams API's shape, stored as is", shared: "" },
    packages: ["better-sqlite3", "pg"],
  },
  store: {
    role: "snapshots shared between nodes (a shared filesystem or S3)",
    imports: { shared: "" },
    packages: ["@aws-sdk/client-s3"],
  },
  tls: {
    role: "domain mode's certificates: the local CA, the operator's files, renewal",
    imports: { shared: "" },
    packages: ["@peculiar/x509", "reflect-metadata"],
    note: "`@peculiar/x509` needs `reflect-metadata` loaded first, which `loadX509` does",
  },
  orchestrator: {
    role: "sandbox lifecycle, pause/resume, TTLs, capacity, fork, snapshots, warm pool",
    imports: {
      vmm: "the `VmmDriver` and `DiskChains` interfaces, `VmSpec`, snapshot records",
      network: "the `SlotPool` and `Slot` interfaces",
      "host-setup": "`GuestArtifacts`",
      tenancy: "`TeamLimits`, `checkQuota`: admission by the team's quotas",
      catalog: "the `Catalog` interface",
      protocol: "",
      shared: "",
    },
    packages: ["@connectrpc/connect", "@connectrpc/connect-node"],
    note: "envd's client; never an HTTP framework: the API and the proxy turn HTTP into calls on `types.ts`",
  },
  builds: {
    role: "template builds: the E2B build API's behaviour, build VMs, the layer cache",
    imports: {
      orchestrator:
        "its `SandboxService` and `TemplateHost` (build VMs are internal sandboxes, layers templates captured from them or booted cold), `EnvdClient`, `DiskSpace`",
      "oci-images": "`pullImage` for `fromImage`",
      catalog: "builds, tags, layer rows",
      protocol: "`ENVD_VERSION`",
      shared: "",
    },
    packages: ["@connectrpc/connect", "tar"],
  },
  events: {
    role: "E2B's lifecycle events outward: their body, webhooks and their signed deliveries",
    imports: {
      catalog: "the event, webhook and delivery rows",
      secrets: "`SecretBox`: signature secrets sealed",
      protocol: "",
      shared: "",
    },
    packages: [],
  },
  relay: {
    role: "one reverse-proxy exchange and the error answers, for proxy, gateway, egress gate",
    imports: { shared: "`WarrenError`" },
    packages: [],
  },
  api: {
    role: "the E2B REST API",
    imports: {
      builds: "`TemplateBuilds`, the template build API's calls",
      orchestrator:
        "through its `index.ts`: its types (`SandboxService`, `ClusterNodeService` and theirs) and its readiness gate, nothing that runs sandboxes",
      tenancy: "teams, keys and quotas behind the routes' auth",
      volumes: "`Volumes`: rows and safe file access",
      secrets: "`Secrets`",
      events: "the event body, `Webhooks`",
      catalog: "the catalog's row types",
      relay: "the error body: `apiErrorBody`, `retryAfterSeconds`",
      protocol: "",
      shared: "",
    },
    packages: ["fastify", "@fastify/cors", "pino"],
  },
  proxy: {
    role: "envd and app-port reverse proxy",
    imports: {
      orchestrator:
        "its interfaces through `types.ts` (`SandboxRouter`, `ProxyRoute`, `RouteResult`, `RouteAccess`)",
      relay: "the exchange, the refusal writer",
      protocol: "`ENVD_PORT`, `ENVD_INTERNAL_PATHS`",
      shared: "",
    },
    packages: [],
  },
  "guest-services": {
    role: "the process that parses what guests and upstreams send (volumes' NFS, the egress gate: DNS, SNI/Host, TLS for header rules; webhook receivers' answers), out of the root server",
    imports: {
      volumes: "the NFS service",
      network: "the egress gate",
      events: "`postWebhook` (by path): deliveries leave from here",
      protocol: "",
      shared: "",
    },
    packages: ["pino"],
  },
  keeper: {
    role: "the small root process that spawns and holds every VMM: the server may die and re-adopt its running sandboxes; the keeper's death kills the VMMs",
    imports: {
      vmm: "only what starting and containing one QEMU takes (`qemu-process.ts`'s launcher, `tap-fd.ts`, `cgroups.ts`, `watchdog.ts`), imported by path so the bundle holds nothing else",
      protocol: "",
      shared: "",
    },
    packages: ["pino"],
  },
  server: {
    role: "composition root of the node server",
    imports: {
      api: "",
      "guest-services": "",
      builds: "",
      proxy: "",
      relay: "",
      orchestrator: "",
      vmm: "",
      network: "",
      "host-setup": "",
      "oci-images": "",
      catalog: "",
      store: "",
      tls: "",
      tenancy: "",
      volumes: "",
      secrets: "",
      events: "",
      protocol: "",
      shared: "",
    },
    packages: ["pino", "prom-client"],
  },
  gateway: {
    role: "multi-node front: placement, admission, routing by sandbox id",
    imports: {
      tenancy: "API key checks and team quotas",
      catalog: "the cluster catalog",
      relay: "relaying requests and upgrades to nodes, error answers",
      tls: "its certificate from the cluster CA, the TLS options that check a node's name",
      protocol: "sandbox host names, the list order and cursor",
      shared: "",
    },
    packages: ["pino"],
  },
  cli: {
    role: "the `warren` command: a client of the API and the SDK",
    imports: {
      tls: "`warren cluster` issues the cluster's certificates; loaded by those commands only",
      protocol: "",
      shared: "",
    },
    packages: ["e2b", "commander"],
  },
  dashboard: {
    role: "the browser app served at /dashboard/: views on the API, a terminal through the proxy",
    imports: { protocol: "the generated envd client, `ENVD_PORT`" },
    packages: [
      "@connectrpc/connect",
      "@connectrpc/connect-web",
      "@xterm/xterm",
      "@xterm/addon-fit",
      "uplot",
    ],
    note: "it runs in a browser: no Node built-ins",
  },
};

/** The tour's folders outside `src/`, before and after it. */
const BEFORE_SRC: readonly [string, string][] = [
  ["proto/", "envd .proto files (process, filesystem): the wire's source of truth"],
];
const AFTER_SRC: readonly [string, string][] = [
  ["bench/", "benchmarks: each prints a table and writes JSON"],
  ["test/", ""],
  [
    "  contracts/",
    "one suite per seam, run on its fake (unit tier) and its real implementation (e2e)",
  ],
  [
    "  unit/",
    "no root, no VMs: contracts/ (the suites' unit runs), agent, api (on a stand-in service), builds, gateway, proxy, orchestrator (on fakes), server; hostile-guest stand-ins",
  ],
  ["  e2e/", "as root: the server with real VMs and the `e2b` SDK; agent, network, vmm, images"],
  [
    "  fakes/",
    "fakes and stand-ins: VMM driver, disk chains, slot pool, guest agent, catalog, cluster, sandbox service, router",
  ],
  [
    "  helpers/",
    "useServer(), leak checks, guests for the e2e tier; what benchmarks share with tests",
  ],
  ["scripts/", "build, test runner, start, host setup, docs generation"],
  ["deploy/", "systemd units, kustomize base and overlays (deploy/README.md)"],
];

/** A generated region: the markers `npm run docs` rewrites between. */
export function generated(name: string, body: string): string {
  return `<!-- ${name}: generated from src/layers.ts by \`npm run docs\` -->\n${body}\n<!-- /${name} -->`;
}

const code = (name: string) => `\`${name}\``;

/** A component's "May import" paragraph, for its README. */
export function describeImports(name: string): string {
  const component = COMPONENTS[name];
  if (!component) throw new Error(`no component ${name}`);
  const arrows = Object.entries(component.imports).map(([to, why]) =>
    why ? `${code(to)} (${why})` : code(to),
  );
  const others = [
    ...(name === "dashboard" ? [] : ["Node built-ins"]),
    ...component.packages.map(code),
  ];
  const parts = [arrows.length ? arrows.join(", ") : "no other component", others.join(", ")];
  const note = component.note ? ` (${component.note})` : "";
  const text = `**May import:** ${parts.join("; ")}${note}. Nothing else of Warren's.`;
  return wrap("", text).join("\n");
}

/** `prefix` then `text`'s words, wrapped at 100 columns under the text's first column. */
function wrap(prefix: string, text: string): string[] {
  const lines: string[] = [];
  let line = prefix;
  for (const word of text.split(" ")) {
    if (line.length > prefix.length && line.length + 1 + word.length > 100) {
      lines.push(line);
      line = " ".repeat(prefix.length) + word;
    } else line = line.length > prefix.length ? `${line} ${word}` : line + word;
  }
  lines.push(line);
  return lines;
}

/** The top README's tour of the tree (a code block). */
export function describeTour(): string {
  const column = 20;
  const entry = (folder: string, role: string) =>
    role ? wrap(folder.padEnd(column), role) : [folder];
  const lines = [
    ...BEFORE_SRC.flatMap(([f, r]) => entry(f, r)),
    "src/",
    ...Object.entries(COMPONENTS).flatMap(([name, c]) => entry(`  ${name}/`, c.role)),
    ...AFTER_SRC.flatMap(([f, r]) => entry(f, r)),
  ];
  return ["```", ...lines, "```"].join("\n");
}

/** Each component's floor: 0 imports no component, else one above the highest it imports. */
export function floors(): Map<string, number> {
  const floor = new Map<string, number>();
  const of = (name: string, path: readonly string[]): number => {
    const known = floor.get(name);
    if (known !== undefined) return known;
    if (path.includes(name)) throw new Error(`a cycle: ${[...path, name].join(" → ")}`);
    const imports = Object.keys(COMPONENTS[name]?.imports ?? {});
    const value = imports.length ? 1 + Math.max(...imports.map((i) => of(i, [...path, name]))) : 0;
    floor.set(name, value);
    return value;
  };
  for (const name of Object.keys(COMPONENTS)) of(name, []);
  return floor;
}

/** The top README's floors: who stands on whom, from the bottom. */
export function describeFloors(): string {
  const byFloor = new Map<number, string[]>();
  for (const [name, floor] of floors()) byFloor.set(floor, [...(byFloor.get(floor) ?? []), name]);
  const rows = [...byFloor.entries()]
    .sort(([a], [b]) => a - b)
    .flatMap(([floor, names]) =>
      names.map((n) => {
        const imports = Object.keys(COMPONENTS[n]?.imports ?? {});
        return `| ${floor} | ${code(n)} | ${imports.length ? imports.map(code).join(", ") : "—"} |`;
      }),
    );
  return ["| floor | component | may import |", "|---|---|---|", ...rows].join("\n");
}
