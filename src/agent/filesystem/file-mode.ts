import { constants, type Stats } from "node:fs";

const { S_IFMT, S_IFDIR, S_IFLNK, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK } = constants;

/**
 * The permission string Go's os.FileMode.String() prints (what envd reports): type letters
 * from "dalTLDpSugct?" followed by rwxrwxrwx, e.g. `-rw-r--r--`, `drwxr-xr-x`, `Lrwxrwxrwx`.
 */
export function permissionString(st: Pick<Stats, "mode">): string {
  const mode = st.mode;
  const type = mode & S_IFMT;
  let prefix = "";
  if (type === S_IFDIR) prefix += "d";
  if (type === S_IFLNK) prefix += "L";
  if (type === S_IFBLK) prefix += "D";
  if (type === S_IFIFO) prefix += "p";
  if (type === S_IFSOCK) prefix += "S";
  if (mode & 0o4000) prefix += "u";
  if (mode & 0o2000) prefix += "g";
  if (type === S_IFCHR) prefix += "Dc";
  if (mode & 0o1000) prefix += "t";
  if (!prefix) prefix = "-";
  const rwx = "rwxrwxrwx";
  let perms = "";
  for (let bit = 0; bit < 9; bit++) perms += mode & (1 << (8 - bit)) ? rwx[bit] : "-";
  return prefix + perms;
}
