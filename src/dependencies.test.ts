// Keeps the architecture's arrows pointing one way (README: "A tour of the tree"): each
// component imports only the components and packages src/layers.ts gives it, and the docs
// generated from that table say what it says. A new arrow is a design decision: make it in
// src/layers.ts, in one line, then `npm run docs`.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, sep } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import {
  COMPONENTS,
  describeFloors,
  describeImports,
  describeTour,
  floors,
  generated,
} from "./layers.js";

const SRC = dirname(fileURLToPath(import.meta.url));

const ALLOWED = Object.fromEntries(
  Object.entries(COMPONENTS).map(([name, c]) => [name, Object.keys(c.imports)]),
);

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
    for (const spec of importsOf(file).filter((s) => s.startsWith("."))) {
      const target = join(dirname(file), spec);
      // The package's manifest (its version) is no component.
      if (target === join(SRC, "..", "package.json")) continue;
      const to = componentOf(target);
      if (to !== from && !ALLOWED[from]?.includes(to)) {
        wrong.push(`${relative(SRC, file)} imports ${to} ("${spec}")`);
      }
    }
  }
  assert.deepEqual(wrong, []);
  floors(); // throws on a cycle
});

/** What `file` imports, statically or dynamically (comments and strings that look alike skipped). */
function importsOf(file: string): string[] {
  const text = readFileSync(file, "utf8");
  return ts.preProcessFile(text, true, true).importedFiles.map((f) => f.fileName);
}

/** `@scope/name/sub` → `@scope/name`, `name/sub` → `name`. */
function packageOf(spec: string): string {
  const parts = spec.split("/");
  return (spec.startsWith("@") ? parts.slice(0, 2) : parts.slice(0, 1)).join("/");
}

it("components import exactly the npm packages their row names", () => {
  const used = new Map<string, Set<string>>();
  for (const file of sources(SRC)) {
    const from = componentOf(file);
    for (const spec of importsOf(file)) {
      if (spec.startsWith(".") || spec.startsWith("node:")) continue;
      used.set(from, (used.get(from) ?? new Set()).add(packageOf(spec)));
    }
  }
  const differ: string[] = [];
  for (const [name, component] of Object.entries(COMPONENTS)) {
    const actual = [...(used.get(name) ?? [])].sort();
    const listed = [...component.packages].sort();
    if (actual.join() !== listed.join()) {
      differ.push(`${name}: imports [${actual.join(", ")}], its row lists [${listed.join(", ")}]`);
    }
  }
  assert.deepEqual(differ, []);
});

it('each README\'s "May import" line, the tour and the floors are generated from the table (npm run docs)', () => {
  const stale: string[] = [];
  const check = (file: string, name: string, body: string) => {
    const text = readFileSync(join(SRC, "..", file), "utf8");
    if (!text.includes(generated(name, body))) stale.push(`${file}: ${name}`);
  };
  for (const name of Object.keys(COMPONENTS)) {
    check(`src/${name}/README.md`, "may-import", describeImports(name));
  }
  check("README.md", "tour", describeTour());
  check("README.md", "floors", describeFloors());
  assert.deepEqual(stale, [], "regenerate with `npm run docs`");
});

it("benchmarks borrow from tests only what test/helpers shares", () => {
  const root = join(SRC, "..");
  const bench = join(root, "bench");
  const files = readdirSync(bench, { recursive: true, encoding: "utf8" })
    .filter((f) => f.endsWith(".ts"))
    .map((f) => join(bench, f));
  const wrong: string[] = [];
  for (const file of files) {
    for (const spec of importsOf(file).filter((s) => s.startsWith("."))) {
      const target = relative(root, join(dirname(file), spec));
      if (/^test\/(e2e|unit)\//.test(target))
        wrong.push(`${relative(root, file)} imports ${target}`);
    }
  }
  assert.deepEqual(wrong, []);
});

it("other components reach the orchestrator through its index (the proxy: types.ts)", () => {
  const wrong: string[] = [];
  const surface = [join(SRC, "orchestrator", "index.ts"), join(SRC, "orchestrator", "types.ts")];
  for (const file of sources(SRC)) {
    if (componentOf(file) === "orchestrator") continue;
    for (const spec of importsOf(file).filter((s) => s.startsWith("."))) {
      const target = join(dirname(file), spec).replace(/\.js$/, ".ts");
      if (componentOf(target) === "orchestrator" && !surface.includes(target)) {
        wrong.push(`${relative(SRC, file)} imports ${relative(SRC, target)}`);
      }
    }
  }
  assert.deepEqual(wrong, []);
});
