// `npm run docs`: rewrites what the docs generate from the code they describe — the tables
// in docs/ (src/shared/config.ts settings, src/shared/errors.ts reasons) and the layering
// (src/layers.ts: each component README's "May import" line, the top README's tour and
// floors). The unit tests fail until this is run after one of those changes.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import {
  COMPONENTS,
  describeFloors,
  describeImports,
  describeTour,
  generated,
} from "../src/layers.js";
import { describeSettings } from "../src/shared/config.js";
import { describeErrors } from "../src/shared/errors.js";

const root = join(import.meta.dirname, "..");
const docs = join(root, "docs");

/** Replaces each run of table lines that starts with a generated table's header. */
function regenerate(file: string, generated: string): void {
  const path = join(docs, file);
  const lines = readFileSync(path, "utf8").split("\n");
  const tables = generated.split("\n\n");
  const out: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const table = tables.find((t) => t.split("\n")[0] === lines[i]);
    if (!table) {
      out.push(lines[i] as string);
      continue;
    }
    while (i + 1 < lines.length && lines[i + 1]?.startsWith("|")) i++;
    out.push(...table.split("\n"));
  }
  writeFileSync(path, out.join("\n"));
}

regenerate("configuration.md", describeSettings());
regenerate("errors.md", describeErrors());

/** Replaces the region `generated(name, …)` marks in `file` (relative to the repository). */
function regenerateRegion(file: string, name: string, body: string): void {
  const path = join(root, file);
  const text = readFileSync(path, "utf8");
  const start = text.indexOf(`<!-- ${name}:`);
  const endMarker = `<!-- /${name} -->`;
  const end = text.indexOf(endMarker, start);
  if (start < 0 || end < 0) throw new Error(`${file} has no ${name} region`);
  writeFileSync(
    path,
    text.slice(0, start) + generated(name, body) + text.slice(end + endMarker.length),
  );
}

for (const name of Object.keys(COMPONENTS)) {
  regenerateRegion(`src/${name}/README.md`, "may-import", describeImports(name));
}
regenerateRegion("README.md", "tour", describeTour());
regenerateRegion("README.md", "floors", describeFloors());
