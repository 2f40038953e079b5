import { isAbsolute, join, normalize } from "node:path";
import { WarrenError } from "../shared/index.js";
import type { UserAccount } from "./users.js";

/**
 * Resolves a request path the way envd does: empty is the default workdir (or home), `~`
 * and relative paths are under the user's home, and the result is absolute and normalised.
 */
export function resolvePath(input: string, user: UserAccount, defaultWorkdir?: string): string {
  if (input.includes("\0")) throw new WarrenError("invalid_argument", "path contains a NUL byte");
  if (input === "") return defaultWorkdir ?? user.home;
  if (input === "~") return user.home;
  if (input.startsWith("~/")) return normalize(join(user.home, input.slice(2)));
  if (input.startsWith("~"))
    throw new WarrenError("invalid_argument", "cannot expand user-specific home dir");
  if (isAbsolute(input)) return normalize(input);
  return normalize(join(user.home, input));
}
