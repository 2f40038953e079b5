import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { it } from "node:test";
import { fileURLToPath } from "node:url";
import semver from "semver";

// A fresh `npm start` runs `npm ci`, which warns (EBADENGINE) for each locked package whose
// `engines.node` leaves out the Node that runs Warren: a newcomer's first screen filled with
// warnings (60 lines once, from node-gyp 13). Pins are chosen so that none does; where a
// dependency's own range would pull one in, package.json's `overrides` pins it back.

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..");

interface LockedPackage {
  readonly version?: string;
  /** npm skips an optional package its Node cannot run, without a warning. */
  readonly optional?: boolean;
  readonly engines?: { readonly node?: string } | readonly string[];
}

it("every locked package admits the running Node in its engines", () => {
  const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as {
    packages: Record<string, LockedPackage>;
  };
  const excluded: string[] = [];
  for (const [path, entry] of Object.entries(lock.packages)) {
    const range = Array.isArray(entry.engines)
      ? undefined
      : (entry.engines as { node?: string } | undefined)?.node;
    if (!path || range === undefined || entry.optional) continue;
    if (!semver.satisfies(process.version, range)) {
      excluded.push(
        `${path.replace(/^.*node_modules\//, "")}@${entry.version} wants node ${range}`,
      );
    }
  }
  assert.deepEqual(excluded, [], `npm ci would warn EBADENGINE on ${process.version}`);
});
