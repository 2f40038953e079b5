import { randomBytes } from "node:crypto";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";

export const ADMIN_TOKEN_FILE = "admin-token";

/**
 * The admin token `<secrets>/admin-token` (0600, in a 0700 directory): made on first start,
 * kept afterwards. It is read here only; the server never logs or prints it.
 */
export async function loadAdminToken(secretsDir: string): Promise<{ token: string; file: string }> {
  const file = join(secretsDir, ADMIN_TOKEN_FILE);
  await mkdir(secretsDir, { recursive: true, mode: 0o700 });
  await chmod(secretsDir, 0o700);
  let token = (
    await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return "";
      throw err;
    })
  ).trim();
  if (token === "") {
    token = `warren_admin_${randomBytes(24).toString("hex")}`;
    // wx: two servers starting on one data dir must not overwrite each other's token.
    await writeFile(file, `${token}\n`, { mode: 0o600, flag: "wx" }).catch(
      async (err: NodeJS.ErrnoException) => {
        if (err.code !== "EEXIST") throw err;
        token = (await readFile(file, "utf8")).trim();
      },
    );
  }
  await chmod(file, 0o600);
  return { token, file };
}
