import { fileURLToPath } from "node:url";

/**
 * The entry of another of the build's bundles (`dist/<name>/main.mjs`): beside the server's
 * own bundle when it runs bundled, in `dist/` when it runs from source (a benchmark's
 * uncontained server, under tsx).
 */
export function bundleEntry(name: string): string {
  const here = import.meta.url;
  const relative = here.endsWith(".ts") ? `../../dist/${name}/main.mjs` : `../${name}/main.mjs`;
  return fileURLToPath(new URL(relative, here));
}
