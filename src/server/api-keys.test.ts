import assert from "node:assert/strict";
import { mkdtempSync, statSync, writeFileSync } from "node:fs";
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { loadApiKeys } from "./api-keys.js";

const dir = mkdtempSync(join(tmpdir(), "warren-keys-"));
after(() => rm(dir, { recursive: true, force: true }));

it("generates a key once, 0600 in a 0700 directory, then keeps it", async () => {
  const secrets = join(dir, "secrets");
  const first = await loadApiKeys(secrets, []);
  assert.match(first.generated ?? "", /^e2b_[0-9a-f]{40}$/);
  assert.equal(statSync(first.file).mode & 0o777, 0o600);
  assert.equal(statSync(secrets).mode & 0o777, 0o700);
  const second = await loadApiKeys(secrets, ["extra"]);
  assert.equal(second.generated, undefined);
  assert.deepEqual([...second.keys], [first.generated, "extra"]);
});

it("accepts several keys in the file, skipping blanks and comments", async () => {
  const secrets = join(dir, "many");
  await loadApiKeys(secrets, []);
  writeFileSync(join(secrets, "api-key"), "# team keys\nk1\n\nk2\n");
  assert.deepEqual([...(await loadApiKeys(secrets, [])).keys], ["k1", "k2"]);
});
