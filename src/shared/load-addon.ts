import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * Loads one of Warren's own native addons for the module at `from` (its `import.meta.url`):
 * from `build/Release/` beside a bundle (dist/agent, dist/server: the build copies each addon
 * there), or from the addon's build folder in the source tree (`<name>/` or `native/<name>/`
 * beside the module, during development).
 */
export function loadAddon<T>(name: string, from: string): T {
  const here = dirname(fileURLToPath(from));
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
  return createRequire(from)(found) as T;
}
