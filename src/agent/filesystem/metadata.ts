import { getAttribute, listAttributes, removeAttribute, setAttribute } from "fs-xattr";

/** File metadata lives in user xattrs under this prefix, as in E2B's envd. */
const PREFIX = "user.e2b.";

export async function readMetadata(path: string): Promise<Record<string, string>> {
  const names = await listAttributes(path).catch(() => [] as string[]);
  const metadata: Record<string, string> = {};
  for (const name of names) {
    if (!name.startsWith(PREFIX)) continue;
    const value = await getAttribute(path, name).catch(() => undefined);
    if (value) metadata[name.slice(PREFIX.length)] = value.toString("utf8");
  }
  return metadata;
}

/** Replaces all of a file's metadata. */
export async function writeMetadata(path: string, metadata: Record<string, string>): Promise<void> {
  const names = await listAttributes(path).catch(() => [] as string[]);
  for (const name of names) {
    if (name.startsWith(PREFIX) && !(name.slice(PREFIX.length) in metadata)) {
      await removeAttribute(path, name);
    }
  }
  for (const [key, value] of Object.entries(metadata))
    await setAttribute(path, PREFIX + key, value);
}
