import type { BuildRow, Catalog, TemplateRow } from "../catalog/index.js";
import { lookupTemplate, splitTag, visibleTo } from "../orchestrator/index.js";
import { WarrenError } from "../shared/index.js";
import { checkTag, DEFAULT_TAG } from "./names.js";

/**
 * A built template's names: its aliases and its tags (`name:tag`, each pointing at one build;
 * `default` makes the template row). E2B's `/templates/aliases` and `/templates/tags`.
 */
export class TemplateTags {
  readonly #catalog: Catalog;

  constructor(catalog: Catalog) {
    this.#catalog = catalog;
  }

  /** `GET /templates/aliases/{alias}`. */
  async alias(
    team: string | undefined,
    name: string,
  ): Promise<{ templateID: string; public: boolean }> {
    const row = await lookupTemplate(this.#catalog, name, team);
    if (!row || row.kind === "layer" || !row.aliases.includes(name) || !visibleTo(row, team)) {
      throw new WarrenError("template_not_found", `no template is named '${name}'`);
    }
    return { templateID: row.id, public: false };
  }
  /** `POST /templates/tags`: the build `target` (`name:tag`) names gets `tags` too. */
  async assignTags(
    team: string | undefined,
    target: string,
    tags: readonly string[],
  ): Promise<{ buildID: string; tags: string[] }> {
    const catalog = this.#catalog;
    const { name, tag } = splitTag(target);
    const row = await lookupTemplate(catalog, name, team);
    if (row?.kind !== "build" || !visibleTo(row, team)) {
      throw new WarrenError("template_not_found", `no built template is named '${name}'`);
    }
    const source = await catalog.getTag(row.id, tag ?? DEFAULT_TAG);
    if (!source) throw new WarrenError("template_not_found", `'${target}' is not a tag of ${name}`);
    const checked = tags.map(checkTag);
    const build = await catalog.getBuild(source.buildId);
    if (!build) throw new WarrenError("build_not_found", `build ${source.buildId} is gone`);
    const layer = await layerOf(this.#catalog, build);
    for (const t of checked) await pointTag(this.#catalog, build, t, layer);
    return { buildID: source.buildId, tags: checked };
  }
  /** `DELETE /templates/tags`. */
  async removeTags(team: string | undefined, name: string, tags: readonly string[]): Promise<void> {
    const catalog = this.#catalog;
    const row = await lookupTemplate(catalog, name, team);
    if (row?.kind !== "build" || !visibleTo(row, team)) {
      throw new WarrenError("template_not_found", `no built template is named '${name}'`);
    }
    for (const tag of tags.map(checkTag)) {
      if (!(await catalog.getTag(row.id, tag))) {
        throw new WarrenError("template_not_found", `'${name}' has no tag '${tag}'`);
      }
      if (tag === DEFAULT_TAG) {
        throw new WarrenError("invalid_argument", `the '${DEFAULT_TAG}' tag cannot be removed`);
      }
      await catalog.deleteTag(row.id, tag);
    }
  }
  async listTags(
    team: string | undefined,
    templateId: string,
  ): Promise<{ tag: string; buildID: string; createdAt: string }[]> {
    const { row } = await findBuiltTemplate(this.#catalog, templateId, team);
    if (!row) return [];
    return (await this.#catalog.listTags(row.id)).map((t) => ({
      tag: t.tag,
      buildID: t.buildId,
      createdAt: t.createdAt,
    }));
  }
}

/** Points `tag` of the build's template at the build; the default tag makes the template row. */
export async function pointTag(
  catalog: Catalog,
  build: BuildRow,
  tag: string,
  layer: TemplateRow,
): Promise<void> {
  const now = new Date().toISOString();
  await catalog.putTag({ templateId: build.templateId, tag, buildId: build.id, createdAt: now });
  if (tag === DEFAULT_TAG) await catalog.putTemplate(templateRow(build, layer));
}
/** The layer a ready build's sandboxes restore. */
/** The layer template a finished build made (what its tags point at). */
export async function layerOf(catalog: Catalog, build: BuildRow): Promise<TemplateRow> {
  const users = build.snapshotId ? await catalog.snapshotUsers(build.snapshotId) : undefined;
  for (const id of users?.templates ?? []) {
    const row = await catalog.getTemplate(id);
    if (row?.kind === "layer") return row;
  }
  throw new WarrenError("build_not_found", `build ${build.id} has no result to tag`);
}
/** A template by id or name with its builds; template_not_found when neither is known. */
/** A template by id or name with the team's builds of it, or its builds alone (not yet made). */
export async function findBuiltTemplate(
  catalog: Catalog,
  reference: string,
  team: string | undefined,
): Promise<{ row?: TemplateRow; builds: BuildRow[] }> {
  const owned = (builds: BuildRow[]) => builds.filter((b) => ownedBy(b, team));
  const row = await lookupTemplate(catalog, reference, team);
  if (row && row.kind !== "layer" && visibleTo(row, team)) {
    return { row, builds: owned(await catalog.listBuilds(row.id)) };
  }
  const builds = row ? [] : owned(await catalog.listBuilds(reference));
  if (builds.length === 0) {
    throw new WarrenError("template_not_found", `template '${reference}' not found`);
  }
  return { builds };
}

/** A build is its team's; undefined (the admin) sees every team's. */
export function ownedBy(build: BuildRow, team: string | undefined): boolean {
  return team === undefined || build.teamId === team;
}

/** The template row a build's result makes: its name, its layer's snapshot, shape and defaults. */
export function templateRow(build: BuildRow, layer: TemplateRow): TemplateRow {
  return {
    id: build.templateId,
    teamId: build.teamId,
    aliases: [build.name],
    kind: "build",
    snapshotId: layer.snapshotId,
    vcpus: layer.vcpus,
    memoryMiB: layer.memoryMiB,
    diskSizeMiB: layer.diskSizeMiB,
    createdAt: build.createdAt,
    ...(layer.config && { config: layer.config }),
  };
}
