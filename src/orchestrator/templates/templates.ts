import { type Catalog, DEFAULT_TEAM_ID, type TemplateRow } from "../../catalog/index.js";
import { WarrenError } from "../../shared/index.js";
import { BASE_TEMPLATE } from "./base-template.js";
import { CODE_INTERPRETER_TEMPLATE } from "./code-interpreter-template.js";

/**
 * Names of the templates Warren makes itself, every team's: no team's template or snapshot
 * may take one, whether the template is here now or not (code-interpreter-v1 may be off).
 */
export const BUILTIN_TEMPLATE_NAMES: readonly string[] = [BASE_TEMPLATE, CODE_INTERPRETER_TEMPLATE];

/**
 * A template by id, name or `name:tag`, as `teamId` sees it: its own and the global ones
 * (another team's read as unknown, names included: names are per team). A built template's
 * tag names one of its builds, whose snapshot the returned row carries. E2B's snapshot ids
 * end in `:default`, the one tag every other template has. template_not_found otherwise;
 * layers (a build's cache) only for Warren's own VMs (`layers`). Undefined `teamId` is the
 * admin's view (`lookupTemplate`).
 */
export async function findTemplate(
  catalog: Catalog,
  reference: string,
  options: { layers?: boolean; teamId?: string } = {},
): Promise<TemplateRow> {
  const notFound = () => new WarrenError("template_not_found", `template '${reference}' not found`);
  const { name, tag } = splitTag(reference);
  const template = await lookupTemplate(catalog, name, options.teamId);
  if (!template || (template.kind === "layer" && !options.layers)) throw notFound();
  if (!visibleTo(template, options.teamId)) throw notFound();
  if (tag === undefined || tag === "default") return template;
  if (template.kind !== "build") throw notFound();
  const tagged = await catalog.getTag(template.id, tag);
  const build = tagged && (await catalog.getBuild(tagged.buildId));
  if (!build?.snapshotId) throw notFound();
  return { ...template, snapshotId: build.snapshotId };
}

/**
 * A template by id or name (no tag) as `teamId` sees it (Catalog.getTemplate). Undefined is
 * the admin's view without X-Team-ID: any team's template by id, names in the default team
 * (where its creates go) and the global ones.
 */
export async function lookupTemplate(
  catalog: Catalog,
  reference: string,
  teamId: string | undefined,
): Promise<TemplateRow | undefined> {
  if (teamId !== undefined) return catalog.getTemplate(reference, teamId);
  return (
    (await catalog.getTemplate(reference)) ??
    (await catalog.getTemplate(reference, DEFAULT_TEAM_ID))
  );
}

/**
 * Why `teamId` may not give a new template or snapshot of its own this name: a built-in
 * template's, or the id of a template it sees. Undefined: the name is the team's to use
 * (its own templates' names are the caller's to judge: a build's rebuild keeps its name).
 * Another team's names and ids never stand in the way.
 */
export async function reservedName(
  catalog: Catalog,
  name: string,
  teamId: string,
): Promise<string | undefined> {
  const seen = await catalog.getTemplate(name, teamId);
  const byName = seen?.aliases.includes(name) ?? false;
  if (BUILTIN_TEMPLATE_NAMES.includes(name) || (byName && seen?.teamId === undefined)) {
    return `'${name}' is a built-in template's name: choose another name`;
  }
  if (seen && !byName) return `'${name}' is a template's id: choose another name`;
  return undefined;
}

/** A shared template (no team) is every team's; a team's only its own (undefined: the admin's view). */
export function visibleTo(template: TemplateRow, teamId: string | undefined): boolean {
  return teamId === undefined || template.teamId === undefined || template.teamId === teamId;
}

/** `name:tag` → its parts; a `:` inside a `namespace/name` path is not a tag. */
export function splitTag(reference: string): { name: string; tag?: string } {
  const match = /^(.*[^/:]):([^/:]+)$/.exec(reference);
  return match ? { name: match[1] as string, tag: match[2] as string } : { name: reference };
}
