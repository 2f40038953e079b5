// `node --import tsx scripts/gen-docs.ts`: rewrites the generated tables in docs/ from the
// code they describe (src/shared/config.ts settings, src/shared/errors.ts reasons). The unit
// tests fail until this is run after a setting or reason changes.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describeSettings } from "../src/shared/config.js";
import { describeErrors } from "../src/shared/errors.js";

const docs = join(import.meta.dirname, "..", "docs");

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
