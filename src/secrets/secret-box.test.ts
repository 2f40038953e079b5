// The sealed form of a secret's value: what a writer of the catalog (another node, whoever
// holds the database) can do with the sealed text alone — nothing that opens it for another
// secret, another team or wider hosts.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, it } from "node:test";
import { SecretBox } from "./secret-box.js";

const dir = mkdtempSync(join(tmpdir(), "warren-secret-box-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const box = await SecretBox.open(join(dir, "secrets"));
const owner = { teamId: "team-a", secretId: "sec_1", hosts: ["api.example.com"] };

it("opens what it sealed, for its owner; the key file is 0600 in a 0700 directory", () => {
  const sealed = box.seal(owner, "sk-live");
  assert.doesNotMatch(sealed, /sk-live/);
  assert.equal(box.open(owner, sealed), "sk-live");
  assert.deepEqual(SecretBox.hostsOf(sealed), ["api.example.com"]);
  assert.equal(statSync(join(dir, "secrets", "values.key")).mode & 0o777, 0o600);
  assert.equal(statSync(join(dir, "secrets")).mode & 0o777, 0o700);
});

it("does not open on another secret's row, another team's, or with its hosts widened", () => {
  const sealed = box.seal(owner, "sk-live");
  assert.throws(() => box.open({ ...owner, secretId: "sec_2" }, sealed), /cannot be opened/);
  assert.throws(() => box.open({ ...owner, teamId: "team-b" }, sealed), /cannot be opened/);
  // The hosts ride in the clear: rewriting them (wider, or none at all) breaks the seal.
  const [scheme, , body] = sealed.split(":");
  for (const hosts of [["*.example.com"], []]) {
    const edited = `${scheme}:${Buffer.from(JSON.stringify(hosts)).toString("base64url")}:${body}`;
    assert.throws(() => box.open(owner, edited), /cannot be opened/, JSON.stringify(hosts));
  }
  // Nor as a value of the older form (bound to the id alone).
  assert.throws(() => box.open(owner, `v1:${body}`), /cannot be opened/);
});

it("never quotes the value in its refusal", () => {
  const sealed = box.seal(owner, "sk-live");
  assert.throws(
    () => box.open({ ...owner, teamId: "team-b" }, sealed),
    (err: Error) => !err.message.includes("sk-live"),
  );
});
