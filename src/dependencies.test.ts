// Keeps the architecture's arrows pointing one way (README: "A tour of the tree"): each
// component imports only the components below it. A new arrow is a design decision: make it
// here, in one line, and in the component's README.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";

const SRC = dirname(fileURLToPath(import.meta.url));

const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  protocol: [],
  shared: [],
  agent: ["protocol", "shared"],
  vmm: ["protocol", "shared"],
  // relay: the egress gate relays a guest's HTTP requests as the proxy relays a client's.
  network: ["relay", "protocol", "shared"],
  "host-setup": ["protocol", "shared"],
  // The host setup's command runner and ext4 image maker.
  "oci-images": ["host-setup", "shared"],
  catalog: ["shared"],
  store: ["shared"],
  tls: ["shared"],
  tenancy: ["catalog", "shared"],
  // Volumes' rows and files (the content API's safe file access).
  volumes: ["catalog", "shared"],
  secrets: ["catalog", "shared"],
  orchestrator: ["vmm", "network", "host-setup", "tenancy", "catalog", "protocol", "shared"],
  builds: ["orchestrator", "oci-images", "catalog", "protocol", "shared"],
  // Relays HTTP requests and upgrades; writes error answers for every server.
  relay: ["shared"],
  api: [
    "builds",
    "orchestrator",
    "tenancy",
    "volumes",
    "secrets",
    "catalog",
    "relay",
    "protocol",
    "shared",
  ],
  proxy: ["orchestrator", "relay", "protocol", "shared"],
  // What parses guests' bytes, in a process of its own: the services it runs, nothing else.
  "guest-services": ["volumes", "network", "protocol", "shared"],
  // The process holding the VMMs: spawning and containing a QEMU (vmm/qemu), nothing else.
  keeper: ["vmm", "protocol", "shared"],
  server: [
    "api",
    "guest-services",
    "builds",
    "proxy",
    "relay",
    "orchestrator",
    "vmm",
    "network",
    "host-setup",
    "oci-images",
    "catalog",
    "store",
    "tls",
    "tenancy",
    "volumes",
    "secrets",
    "protocol",
    "shared",
  ],
  // tls: its certificate from the cluster CA, and the node names it checks.
  gateway: ["tenancy", "catalog", "relay", "tls", "protocol", "shared"],
  // tls: `warren cluster` issues the cluster's certificates.
  cli: ["tls", "protocol", "shared"],
  // Runs in a browser: the generated envd client only.
  dashboard: ["protocol"],
};

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "node_modules" ? [] : sources(path);
    return entry.name.endsWith(".ts") && !entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

function componentOf(path: string): string {
  return relative(SRC, path).split(sep)[0] ?? "";
}

it("components import only the components below them", () => {
  const components = readdirSync(SRC, { withFileTypes: true })
    .filter((e) => e.isDirectory())
    .map((e) => e.name);
  assert.deepEqual(
    components.filter((c) => !(c in ALLOWED)),
    [],
    "every component has a row",
  );
  const wrong: string[] = [];
  for (const file of sources(SRC)) {
    const from = componentOf(file);
    const text = readFileSync(file, "utf8");
    for (const [, spec] of text.matchAll(/(?:from|import)\s*\(?\s*"(\.[^"]+)"/g)) {
      const target = join(dirname(file), spec as string);
      // The package's manifest (its version) is no component.
      if (target === join(SRC, "..", "package.json")) continue;
      const to = componentOf(target);
      if (to !== from && !ALLOWED[from]?.includes(to)) {
        wrong.push(`${relative(SRC, file)} imports ${to} ("${spec}")`);
      }
    }
  }
  assert.deepEqual(wrong, []);
});
