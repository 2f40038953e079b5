import { builtinModules, createRequire } from "node:module";
import { isAbsolute, join } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import vm from "node:vm";

/**
 * Module loading for cells. A cell's `import` and `require` resolve as a module in the
 * context's cwd would (its node_modules, then the parents'), then from the global
 * node_modules folders: NODE_PATH's and the usual npm prefixes'. The cwd is read at each
 * call: `process.chdir` (envd's change of directory) applies to the next import.
 */

/** Global node_modules folders, in order. */
export function globalModuleDirs(env: NodeJS.ProcessEnv = process.env): string[] {
  const dirs = (env.NODE_PATH ?? "").split(":").filter((dir) => isAbsolute(dir));
  for (const prefix of [env.npm_config_prefix, "/usr/local", "/usr"]) {
    if (prefix && isAbsolute(prefix)) dirs.push(join(prefix, "lib", "node_modules"));
  }
  return [...new Set(dirs)];
}

type Importer = (specifier: string, options?: ImportCallOptions) => Promise<unknown>;

/** A file name in `dir` that imports resolve against (it need not exist). */
const referrer = (dir: string) => join(dir, "[warren-cell]");

/** An `import()` made from `dir`, by Node's own ESM loader. */
const importers = new Map<string, Importer>();
function importerFor(dir: string): Importer {
  let importer = importers.get(dir);
  if (!importer) {
    const script = new vm.Script("(specifier, options) => import(specifier, options)", {
      filename: referrer(dir),
      importModuleDynamically: vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER,
    });
    importer = script.runInThisContext() as Importer;
    importers.set(dir, importer);
  }
  return importer;
}

/** `import(specifier)` for a cell: from the cwd, then (bare names) from the global folders. */
export async function importModule(given: unknown, options?: ImportCallOptions): Promise<unknown> {
  const specifier = String(given); // import() takes anything (a URL object) as a string
  const cwd = process.cwd();
  try {
    return await importerFor(cwd)(specifier, options);
  } catch (err) {
    if (!isBare(specifier) || !packageMissing(err, specifier)) throw err;
    for (const dir of globalModuleDirs()) {
      try {
        return await importerFor(dir)(specifier, options);
      } catch (again) {
        if (!packageMissing(again, specifier)) throw again;
      }
    }
    throw err;
  }
}

/** `import.meta` for a cell: as if it were a module file in the cwd. */
export function importMeta(): {
  url: string;
  filename: string;
  dirname: string;
  resolve(s: string): string;
} {
  const cwd = process.cwd();
  const filename = referrer(cwd);
  return {
    url: pathToFileURL(filename).href,
    filename,
    dirname: cwd,
    resolve: (specifier) => {
      if (builtinModules.includes(specifier) || specifier.startsWith("node:")) return specifier;
      if (!isBare(specifier)) return new URL(specifier, pathToFileURL(filename)).href;
      return pathToFileURL(cellRequire.resolve(specifier)).href;
    },
  };
}

/** `require` for cells: CommonJS resolution from the cwd, then from the global folders. */
export const cellRequire: NodeJS.Require = Object.assign(
  (id: string): unknown => requireFrom(id, (req, spec) => req(spec)),
  {
    resolve: Object.assign(
      (id: string, options?: { paths?: string[] }) =>
        requireFrom(id, (req, spec) => req.resolve(spec, options)),
      { paths: (id: string) => createRequire(referrer(process.cwd())).resolve.paths(id) },
    ),
    cache: createRequire(import.meta.url).cache,
    extensions: createRequire(import.meta.url).extensions,
    main: undefined,
  },
) as NodeJS.Require;

function requireFrom<T>(id: string, load: (req: NodeJS.Require, id: string) => T): T {
  try {
    return load(createRequire(referrer(process.cwd())), id);
  } catch (err) {
    if (!isBare(id) || (err as NodeJS.ErrnoException).code !== "MODULE_NOT_FOUND") throw err;
    for (const dir of globalModuleDirs()) {
      try {
        return load(createRequire(referrer(dir)), id);
      } catch (again) {
        if ((again as NodeJS.ErrnoException).code !== "MODULE_NOT_FOUND") throw again;
      }
    }
    throw err;
  }
}

function isBare(specifier: string): boolean {
  return !(
    specifier.startsWith(".") ||
    specifier.startsWith("/") ||
    specifier.startsWith("#") ||
    /^[a-zA-Z][a-zA-Z0-9+.-]*:/.test(specifier) ||
    builtinModules.includes(specifier)
  );
}

/** True when `err` says the package `specifier` names is not there (not a file inside it). */
function packageMissing(err: unknown, specifier: string): boolean {
  const e = err as { code?: string; message?: string };
  if (e.code !== "ERR_MODULE_NOT_FOUND") return false;
  const name = specifier.startsWith("@")
    ? specifier.split("/").slice(0, 2).join("/")
    : (specifier.split("/")[0] ?? specifier);
  return (e.message ?? "").includes(`Cannot find package '${name}'`);
}
