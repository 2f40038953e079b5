/**
 * The template build routes on TemplateBuilds over the in-memory catalog, with a host that
 * runs no VMs (a STAND-IN: builds that would start one are covered by
 * test/e2e/template-build.test.ts). `findsBase`: the host finds `base`, so a build gets as far
 * as its first step that needs a VM (its cache lookups are real) and fails there.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";
import type { BuildHost } from "../../../src/builds/builder.js";
import { TemplateBuilds, type TemplateBuildsOptions } from "../../../src/builds/index.js";
import type { TemplateRow } from "../../../src/catalog/index.js";
import { silentLogger, WarrenError } from "../../../src/shared/index.js";
import { InMemoryCatalog } from "../../fakes/in-memory-catalog.js";
import { type Harness, useApi } from "./api-harness.js";

const dir = await mkdtemp(join(tmpdir(), "warren-api-templates-"));
after(() => rm(dir, { recursive: true, force: true }));

const noVms = (): never => {
  throw new WarrenError("internal", "this stand-in host runs no VMs");
};
/** As a real host's async calls fail: a rejected promise. */
const noVmsAsync = async (): Promise<never> => noVms();

export const BASE_ROW: TemplateRow = {
  id: "basetemplateid000000",
  aliases: ["base"],
  kind: "base",
  snapshotId: "snap-base",
  vcpus: 2,
  memoryMiB: 512,
  diskSizeMiB: 2048,
  createdAt: "2030-01-01T00:00:00.000Z",
};

export interface HarnessOptions extends Partial<Omit<TemplateBuildsOptions, "catalog" | "host">> {
  readonly findsBase?: boolean;
  readonly catalog?: InMemoryCatalog;
}

export async function harness(options: HarnessOptions = {}) {
  const { findsBase, ...overrides } = options;
  const catalog = options.catalog ?? new InMemoryCatalog();
  await catalog.putTemplate(BASE_ROW);
  const host: BuildHost & { deleteTemplate(id: string): Promise<void> } = {
    templateShape: { vcpus: 2, memoryMiB: 512 },
    imagesFingerprint: "fp",
    baseRootfs: "/nonexistent/base.ext4",
    findTemplate: findsBase ? async () => BASE_ROW : noVms,
    guestEndpoint: noVms,
    captureTemplate: noVmsAsync,
    bootTemplate: noVmsAsync,
    dropTemplate: noVmsAsync,
    create: noVmsAsync,
    kill: noVmsAsync,
    deleteTemplate: async () => {},
  };
  const builds = new TemplateBuilds({
    catalog,
    host,
    dir: await mkdtemp(join(dir, "b-")),
    logger: silentLogger,
    uploadLimitBytes: 1024,
    stepTimeoutMs: 60_000,
    readyTimeoutMs: 60_000,
    maxVcpus: 8,
    maxMemoryMiB: 8192,
    ...overrides,
  });
  return { ...useApi({ builds: () => builds }), catalog, builds };
}

export async function requestBuild(call: Harness["call"], name = "my-env") {
  const res = await call("POST", "/v3/templates", { body: { name, cpuCount: 2, memoryMB: 1024 } });
  assert.equal(res.statusCode, 202, res.body);
  return res.json() as { templateID: string; buildID: string; names: string[]; tags: string[] };
}

/** The path and query of a COPY's upload link for `hash` (asserting one is offered). */
export async function uploadPath(
  call: Harness["call"],
  templateId: string,
  hash: string,
): Promise<string> {
  const res = await call("GET", `/templates/${templateId}/files/${hash}`);
  assert.equal(res.statusCode, 201, res.body);
  const { present, url } = res.json() as { present: boolean; url?: string };
  assert.equal(present, false, `no upload of ${hash} for ${templateId} yet`);
  assert.ok(url);
  return new URL(url).pathname + new URL(url).search;
}

/** Whether the template's COPY files with `hash` are here. */
export async function isPresent(
  call: Harness["call"],
  templateId: string,
  hash: string,
): Promise<boolean> {
  const res = await call("GET", `/templates/${templateId}/files/${hash}`);
  assert.equal(res.statusCode, 201, res.body);
  return (res.json() as { present: boolean }).present;
}
