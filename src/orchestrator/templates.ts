import type { Catalog, TemplateRow } from "../catalog/index.js";
import { WarrenError } from "../shared/index.js";

/**
 * A template by id or name, with an optional `:tag`: a built template's tag names one of
 * its builds, whose snapshot the returned row carries. E2B's snapshot ids end in `:default`,
 * the one tag every other template has. template_not_found otherwise; layers (a build's
 * cache) only for Warren's own VMs (`layers`).
 */
export async function findTemplate(
  catalog: Catalog,
  reference: string,
  options: { layers?: boolean; teamId?: string } = {},
): Promise<TemplateRow> {
  const notFound = () => new WarrenError("template_not_found", `template '${reference}' not found`);
  const { name, tag } = splitTag(reference);
  const template = await catalog.getTemplate(name);
  if (!template || (template.kind === "layer" && !options.layers)) throw notFound();
  if (!visibleTo(template, options.teamId)) throw notFound();
  if (tag === undefined || tag === "default") return template;
  if (template.kind !== "build") throw notFound();
  const tagged = await catalog.getTag(template.id, tag);
  const build = tagged && (await catalog.getBuild(tagged.buildId));
  if (!build?.snapshotId) throw notFound();
  return { ...template, snapshotId: build.snapshotId };
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
