import type { Catalog, TemplateRow } from "../catalog/index.js";
import { WarrenError } from "../shared/index.js";

/**
 * A template by id or name; template_not_found otherwise. A `:tag` suffix is ignored: E2B's
 * snapshot ids end in `:default`, and Warren keeps one tag per template.
 */
export async function findTemplate(catalog: Catalog, idOrAlias: string): Promise<TemplateRow> {
  const template = await catalog.getTemplate(idOrAlias.replace(/:[^/:]*$/, ""));
  if (!template) throw new WarrenError("template_not_found", `template '${idOrAlias}' not found`);
  return template;
}
