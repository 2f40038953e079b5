import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { WarrenError } from "../shared/index.js";
import { cacheKey, isBaseImage, layerId } from "./builder.js";
import { InvalidStep, parseBuildSpec } from "./spec.js";

const HASH = "a".repeat(64);

function rejects(body: unknown, message: RegExp): void {
  assert.throws(
    () => parseBuildSpec(body),
    (err: unknown) =>
      err instanceof WarrenError && err.reason === "build_invalid" && message.test(err.message),
  );
}

describe("parseBuildSpec", () => {
  it("reads what the SDK sends for every builder step", () => {
    const spec = parseBuildSpec({
      fromImage: "e2bdev/base",
      startCmd: "python3 -m http.server 8080",
      readyCmd: '[ -n "$(ss -Htuln sport = :8080)" ]',
      force: false,
      steps: [
        {
          type: "COPY",
          args: ["app", "/home/user/app", "", "0755"],
          filesHash: HASH,
          force: false,
          resolveSymlinks: false,
        },
        { type: "RUN", args: ["apt-get update && apt-get install -y jq", "root"], force: false },
        { type: "RUN", args: ["whoami"], force: true },
        { type: "WORKDIR", args: ["/home/user/app"] },
        { type: "USER", args: ["builder", "true"] },
        { type: "ENV", args: ["A", "1", "B", "two words"] },
      ],
    });
    assert.deepEqual(spec.source, { kind: "image", reference: "e2bdev/base" });
    assert.equal(spec.startCmd, "python3 -m http.server 8080");
    assert.deepEqual(spec.steps[0], {
      type: "COPY",
      src: "app",
      dest: "/home/user/app",
      mode: "0755",
      filesHash: HASH,
      number: 1,
      force: false,
    });
    assert.deepEqual(spec.steps[1], {
      type: "RUN",
      command: "apt-get update && apt-get install -y jq",
      user: "root",
      number: 2,
      force: false,
    });
    assert.equal(spec.steps[2]?.force, true, "skipCache marks the steps after it");
    assert.deepEqual(spec.steps[4], {
      type: "USER",
      user: "builder",
      sudo: true,
      number: 5,
      force: false,
    });
    assert.deepEqual(spec.steps[5], {
      type: "ENV",
      vars: { A: "1", B: "two words" },
      number: 6,
      force: false,
    });
  });

  it("defaults to e2bdev/base, reads fromTemplate and registry credentials", () => {
    assert.deepEqual(parseBuildSpec({}).source, { kind: "image", reference: "e2bdev/base" });
    assert.deepEqual(parseBuildSpec({ fromTemplate: "my-env:v2" }).source, {
      kind: "template",
      reference: "my-env:v2",
    });
    assert.deepEqual(
      parseBuildSpec({
        fromImage: "registry.example/x:1",
        fromImageRegistry: { type: "registry", username: "u", password: "p" },
      }).source,
      {
        kind: "image",
        reference: "registry.example/x:1",
        credentials: { type: "registry", username: "u", password: "p" },
      },
    );
  });

  it("refuses what it cannot build, naming the step", () => {
    rejects(
      {
        steps: [
          { type: "RUN", args: ["true"] },
          { type: "HEALTHCHECK", args: [] },
        ],
      },
      /^step 2: unsupported step type "HEALTHCHECK"/,
    );
    rejects(
      { steps: [{ type: "RUN", args: [] }] },
      /^step 1 \(RUN\): takes 1 to 2 arguments, got 0/,
    );
    rejects({ steps: [{ type: "RUN", args: ["  "] }] }, /step 1 \(RUN\): the command is empty/);
    rejects(
      { steps: [{ type: "COPY", args: ["../etc", "/x"], filesHash: HASH }] },
      /must be relative/,
    );
    rejects({ steps: [{ type: "COPY", args: ["a", "/x"] }] }, /step 1 \(COPY a\): filesHash/);
    rejects(
      { steps: [{ type: "COPY", args: ["a", "/x", "", "rwx"], filesHash: HASH }] },
      /mode 'rwx'/,
    );
    rejects({ steps: [{ type: "ENV", args: ["A"] }] }, /step 1 \(ENV\): takes name, value pairs/);
    rejects({ steps: [{ type: "ENV", args: ["1A", "x"] }] }, /'1A' is not a variable name/);
    rejects({ steps: [{ type: "USER", args: ["bad user"] }] }, /'bad user' is not a user name/);
    rejects({ steps: [{ type: "USER", args: ["u", "maybe"] }] }, /must be "true" or "false"/);
    rejects({ fromImage: "a", fromTemplate: "b" }, /not both/);
    // Wrong arguments name their step (the build fails there); malformed steps do not.
    const stepOf = (body: unknown) => {
      try {
        parseBuildSpec(body);
      } catch (err) {
        return err instanceof InvalidStep ? err.step : "malformed";
      }
      return "accepted";
    };
    assert.equal(
      stepOf({
        steps: [
          { type: "RUN", args: ["true"] },
          { type: "USER", args: [";"] },
        ],
      }),
      2,
    );
    assert.equal(stepOf({ steps: [{ type: "ONBUILD", args: [] }] }), "malformed");
    assert.equal(stepOf({ steps: [{ type: "RUN", args: [1] }] }), "malformed");
    rejects(
      { fromImageRegistry: { type: "registry", username: "u", password: "p" }, fromTemplate: "b" },
      /needs fromImage/,
    );
    rejects(
      { fromImage: "x", fromImageRegistry: { type: "azure" } },
      /must be "registry", "aws" or "gcp"/,
    );
    rejects({ steps: "RUN true" }, /steps must be an array/);
    rejects({ force: "yes" }, /force must be a boolean/);
  });
});

describe("the layer cache key", () => {
  const step = { type: "RUN", command: "make", number: 3, force: false } as const;

  it("depends on the parent and the definition, not on the step's place or force flag", () => {
    const key = cacheKey("parent", step);
    assert.equal(cacheKey("parent", { ...step, number: 7, force: true }), key);
    assert.notEqual(cacheKey("other parent", step), key);
    assert.notEqual(cacheKey("parent", { ...step, command: "make all" }), key);
    assert.notEqual(cacheKey("parent", { ...step, user: "root" }), key);
  });

  it("changes with a COPY's files", () => {
    const copy = {
      type: "COPY",
      src: "a",
      dest: "/a",
      filesHash: HASH,
      number: 1,
      force: false,
    } as const;
    assert.notEqual(cacheKey("p", copy), cacheKey("p", { ...copy, filesHash: "b".repeat(64) }));
  });

  it("names layers like any template id", () => {
    assert.match(layerId(cacheKey("p", step)), /^[a-z0-9]{20}$/);
  });

  it("knows the SDK's base image", () => {
    assert.ok(isBaseImage("e2bdev/base"));
    assert.ok(isBaseImage("docker.io/e2bdev/base:latest"));
    assert.ok(!isBaseImage("e2bdev/base:other"));
    assert.ok(!isBaseImage("debian:stable"));
  });
});
