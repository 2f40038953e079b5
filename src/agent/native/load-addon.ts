import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Loads one of the agent's own native addons: from `build/Release/` beside the bundled
 * envd (the agent drive layout), or from its build folder in the source tree (development).
 */
export function loadAddon<T>(name: string): T {
  const here = dirname(fileURLToPath(import.meta.url));
  const candidates = [
    join(here, "build", "Release", `${name}.node`),
    join(here, name, "build", "Release", `${name}.node`),
    join(here, "native", name, "build", "Release", `${name}.node`),
  ];
  const found = candidates.find((path) => existsSync(path));
  if (!found) {
    throw new Error(
      `native addon '${name}' is not built (run \`npm run build\`); looked in ${candidates.join(", ")}`,
    );
  }
  return createRequire(import.meta.url)(found) as T;
}
