import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { it } from "node:test";
import {
  describeErrors,
  ERROR_KINDS,
  ERROR_REASONS,
  kindOf,
  toWarrenError,
  WarrenError,
} from "./errors.js";

it("every reason maps to a kind, and so to one status", () => {
  for (const [reason, spec] of Object.entries(ERROR_REASONS)) {
    assert.ok(spec.kind in ERROR_KINDS, `${reason} has a known kind`);
    assert.equal(kindOf(reason as keyof typeof ERROR_REASONS), spec.kind);
    assert.match(reason, /^[a-z]+(_[a-z]+)+$/, "reasons are snake_case");
    assert.ok(!(reason in ERROR_KINDS), `${reason} is not also a kind`);
  }
  const error = new WarrenError("capacity_exhausted", "node at capacity");
  assert.deepEqual(
    [error.reason, error.kind, error.status],
    ["capacity_exhausted", "resource_exhausted", 429],
  );
  const plain = new WarrenError("invalid_argument", "body/timeout must be integer");
  assert.deepEqual(
    [plain.reason, plain.kind, plain.status],
    ["invalid_argument", "invalid_argument", 400],
  );
});

it("toWarrenError keeps WarrenErrors and maps errno codes, keeping the cause", () => {
  const own = new WarrenError("sandbox_paused", "paused");
  assert.equal(toWarrenError(own), own);
  const enoent = Object.assign(new Error("no such file"), { code: "ENOENT" });
  const wrapped = toWarrenError(enoent, "read /x");
  assert.deepEqual(
    [wrapped.reason, wrapped.message, wrapped.cause],
    ["not_found", "read /x: no such file", enoent],
  );
  assert.equal(toWarrenError("boom").reason, "internal");
});

it("toWarrenError maps fs.cp's refusals (a move across filesystems) to 4xx, not internal", async () => {
  // Found by the envd fuzz (seed 829086913): Move of a directory onto /proc/self/environ.
  const { cp, mkdir, mkdtemp, writeFile, rm } = await import("node:fs/promises");
  const { join } = await import("node:path");
  const { tmpdir } = await import("node:os");
  const dir = await mkdtemp(join(tmpdir(), "warren-cp-"));
  try {
    await writeFile(join(dir, "file"), "x");
    await mkdir(join(dir, "directory"));
    const err = await cp(join(dir, "directory"), join(dir, "file"), { recursive: true }).catch(
      (e: unknown) => e,
    );
    assert.equal((err as NodeJS.ErrnoException).code, "ERR_FS_CP_DIR_TO_NON_DIR");
    assert.equal(toWarrenError(err).status, 400, String(err));
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

it("docs/errors.md carries the current tables", async () => {
  const doc = await readFile(new URL("../../docs/errors.md", import.meta.url), "utf8");
  assert.ok(doc.includes(describeErrors()), "regenerate the tables in docs/errors.md");
});
