/**
 * Template names and tags as the build API takes them: `name` or `name:tag`, tags defaulting
 * to `default`.
 */
import { splitTag } from "../orchestrator/index.js";
import { WarrenError } from "../shared/index.js";

const NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;
const TAG = /^[a-zA-Z0-9][a-zA-Z0-9._-]{0,62}$/;
export const DEFAULT_TAG = "default";

/** `name` or `name:tag`; tags default to `default`. */
export function parseName(raw: string, tags: readonly string[] | undefined) {
  const { name, tag } = splitTag(raw);
  if (!NAME.test(name)) {
    throw new WarrenError(
      "invalid_argument",
      `template name '${name}' must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit`,
    );
  }
  const all = [...(tags ?? []), ...(tag ? [tag] : [])].map(checkTag);
  return { name, tags: all.length > 0 ? [...new Set(all)] : [DEFAULT_TAG] };
}

export function checkTag(tag: string): string {
  if (!TAG.test(tag)) {
    throw new WarrenError(
      "invalid_argument",
      `tag '${tag}' must be 1-63 characters of letters, digits, '.', '_' or '-'`,
    );
  }
  return tag;
}
