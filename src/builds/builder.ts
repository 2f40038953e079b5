/**
 * One build, from its source to the snapshot sandboxes restore: the source becomes the
 * first layer (a template, or an image booted cold), then each step either is found in the
 * layer cache or runs in a build VM (a sandbox restored from the layer before it) and is
 * captured as a layer; last the start command runs, its ready check passes, and the VM is
 * captured once more. Every create from the result is a restore, like `base`.
 */
import { createHash } from "node:crypto";
import { stat } from "node:fs/promises";
import type { Readable } from "node:stream";
import type { Catalog, TemplateRow } from "../catalog/index.js";
import type { SandboxService, TemplateHost } from "../orchestrator/index.js";
import { type Logger, toWarrenError, WarrenError } from "../shared/index.js";
import type { BuildLog } from "./build-log.js";
import { GuestShell } from "./guest-shell.js";
import type { BuildSpec, NumberedStep } from "./spec.js";
import { BASE_IMAGE } from "./spec.js";
import { type BuildContext, runStep, StepFailed, withEnv } from "./steps.js";
import type { ImageSource } from "./types.js";

export type BuildHost = TemplateHost & Pick<SandboxService, "create" | "kill">;

export interface BuilderOptions {
  readonly catalog: Catalog;
  readonly host: BuildHost;
  readonly images?: ImageSource;
  readonly logger: Logger;
  /** Longest a step's command may run. */
  readonly stepTimeoutMs: number;
  /** Longest the ready check may keep failing after the start command started. */
  readonly readyTimeoutMs: number;
}

/** A build's COPY archives by files hash, opened by the caller for the build's life. */
export interface BuildArchives {
  /** SHA-256 of the archive's bytes: part of its COPY layer's cache key. */
  digest(hash: string): string;
  /** The archive's bytes from its start, as a stream (read once per pass). */
  read(hash: string): Readable;
}

/** What a build asks for besides its steps. */
export interface BuildShape {
  readonly vcpus: number;
  readonly memoryMiB: number;
  /** Free disk the template must have beyond its image (minFreeDiskMb). */
  readonly minFreeDiskMiB?: number;
  /** cpuCount/memoryMB were given (else a `fromTemplate` build keeps the template's). */
  readonly explicit: boolean;
}

/** A layer's config in the catalog: the cache key and the context its steps left. */
export interface LayerConfig {
  readonly key: string;
  readonly context: BuildContext;
  readonly startCmd?: string;
  readonly readyCmd?: string;
}

/** A build's first layer, the context its steps start in, and its cache key. */
interface BaseLayer {
  readonly layer: TemplateRow;
  readonly context: BuildContext;
  readonly key: string;
}

/**
 * The layers a build made, in order. A failed build drops them all but an image's first
 * boot: that is the image's own cache (like its pulled blobs), not the failed build's work.
 */
export class MadeLayers {
  readonly ids: string[] = [];
  readonly #images = new Set<string>();

  add(id: string, options: { image?: boolean } = {}): void {
    this.ids.push(id);
    if (options.image) this.#images.add(id);
  }

  /** What a failure drops, newest first. */
  droppedOnFailure(): string[] {
    return this.ids.filter((id) => !this.#images.has(id)).reverse();
  }
}

/** A failed build: what failed (E2B's `step`: "base", a step number, "finalize"). */
export class BuildFailed extends Error {
  readonly step: string;

  constructor(step: string, message: string) {
    super(message);
    this.step = step;
  }
}

const BUILD_VM_TTL_MS = 6 * 60 * 60 * 1000;
const READY_POLL_MS = 500;
const DEFAULT_READY_CMD = "sleep 20";
/** The start command's process settles before the capture (TCG: fewer blocks to re-translate). */
const SETTLE_MS = 1_000;

export class Builder {
  readonly #o: BuilderOptions;

  constructor(options: BuilderOptions) {
    this.#o = options;
  }

  /**
   * Runs the build for `team` (its build VMs are the team's, and its steps' layers are cached
   * for that team alone); resolves with its final layer (what sandboxes restore).
   */
  async run(
    team: string,
    spec: BuildSpec,
    shape: BuildShape,
    log: BuildLog,
    made: MadeLayers,
    signal: AbortSignal,
    archives: BuildArchives,
  ): Promise<TemplateRow> {
    const base = await this.#baseLayer(team, spec, shape, log, made, signal).catch(
      (err: unknown) => {
        throw failure("base", err);
      },
    );
    let current = base.layer;
    let context = base.context;
    // A team's steps are its own: another team's identical steps never reuse its layers.
    let key = teamKey(base.key, team);
    let vm: BuildVm | undefined;
    try {
      for (const step of spec.steps) {
        const label = String(step.number);
        // A COPY's layer is its bytes': the files hash is only the client's name for them.
        key = cacheKey(
          key,
          step,
          step.type === "COPY" ? archives.digest(step.filesHash) : undefined,
        );
        if (!vm && !(spec.force || step.force)) {
          const cached = await this.#cached(key);
          if (cached) {
            log.add("info", `CACHED [${label}] ${describe(step)}`, label);
            current = cached;
            context = (cached.config as unknown as LayerConfig).context;
            continue;
          }
        }
        if (step.type === "ENV") {
          // Not captured alone: it changes no file, and the next layer's key covers it.
          context = withEnv(context, step.vars);
          log.add("info", `[${label}] ${describe(step)}`, label);
          continue;
        }
        vm ??= await this.#startVm(team, current, log, label, signal, archives);
        log.add("info", `[${label}] ${describe(step)}`, label);
        const started = performance.now();
        context = await runStep(
          step,
          context,
          vm.io(log, label, signal, this.#o.stepTimeoutMs),
        ).catch((err: unknown) => {
          throw failure(label, err);
        });
        current = await this.#capture(vm, key, context, {}, made);
        log.add("debug", `[${label}] done in ${seconds(started)}, layer ${current.id}`, label);
      }
      const finalKey = digest(key, "FINALIZE", spec.startCmd ?? "", spec.readyCmd ?? "");
      if (!vm && !spec.force) {
        const cached = await this.#cached(finalKey);
        if (cached) {
          log.add("info", "CACHED [finalize] start command and ready check", "finalize");
          return cached;
        }
      }
      vm ??= await this.#startVm(team, current, log, "finalize", signal, archives);
      return await this.#finalize(vm, spec, context, finalKey, log, made, signal).catch(
        (err: unknown) => {
          throw failure("finalize", err);
        },
      );
    } finally {
      if (vm) {
        vm.shell.close();
        await this.#o.host.kill(vm.sandboxId).catch(() => {});
      }
    }
  }

  /** The source as a layer: a template as it is, or an image (or a reshaped base) booted cold. */
  async #baseLayer(
    team: string,
    spec: BuildSpec,
    shape: BuildShape,
    log: BuildLog,
    made: MadeLayers,
    signal: AbortSignal,
  ): Promise<BaseLayer> {
    const { host } = this.#o;
    const diskSizeMiB = shape.minFreeDiskMiB;
    const source = spec.source;
    if (source.kind === "template" || isBaseImage(source.reference)) {
      const reference = source.kind === "template" ? source.reference : "base";
      const template = await host.findTemplate(reference, team);
      const sameShape =
        (!shape.explicit && source.kind === "template") ||
        (template.vcpus === shape.vcpus && template.memoryMiB === shape.memoryMiB);
      if (sameShape && diskSizeMiB === undefined) {
        log.add("info", `FROM template ${reference} (${template.id})`, "base");
        return {
          layer: template,
          context: contextOf(template),
          key: digest("template", template.snapshotId),
        };
      }
      // `base` is its rootfs booted: another shape boots that rootfs again. A captured or
      // built template's disk is a snapshot's, whose machine shape stays.
      if (source.kind === "template" && template.kind !== "base") {
        throw new WarrenError(
          "build_invalid",
          `fromTemplate ${reference}: its machine shape (${template.vcpus} vCPUs, ${template.memoryMiB} MiB) is fixed; build without cpuCount, memoryMB and minFreeDiskMb, or from its image`,
        );
      }
      return this.#bootLayer(
        { rootfs: host.baseRootfs, digest: `base-rootfs:${host.imagesFingerprint}` },
        DEFAULT_CONTEXT,
        shape,
        log,
        made,
      );
    }
    const images = this.#o.images;
    if (!images) {
      throw new WarrenError(
        "build_invalid",
        `fromImage ${source.reference}: OCI images are not enabled`,
      );
    }
    log.add("info", `FROM ${source.reference}: pulling`, "base");
    const image = await images.pull(source.reference, source.credentials, {
      onProgress: (line) => log.add("info", line, "base"),
      signal,
    });
    log.add("info", `FROM ${source.reference}: ${image.digest}`, "base");
    const context: BuildContext = {
      user: "user",
      envVars: image.envVars,
      ...(image.workdir && { workdir: image.workdir }),
    };
    return this.#bootLayer(image, context, shape, log, made);
  }

  /** A root filesystem booted cold with the build's shape, cached by image and shape. */
  async #bootLayer(
    image: { rootfs: string; digest: string },
    context: BuildContext,
    shape: BuildShape,
    log: BuildLog,
    made: MadeLayers,
  ): Promise<BaseLayer> {
    const { host } = this.#o;
    const key = digest(
      "image",
      image.digest,
      host.imagesFingerprint,
      String(shape.vcpus),
      String(shape.memoryMiB),
      String(shape.minFreeDiskMiB ?? 0),
    );
    const cached = await this.#cached(key);
    if (cached) {
      log.add("info", `CACHED [base] booted ${image.digest}`, "base");
      return { layer: cached, context, key };
    }
    log.add(
      "info",
      `booting ${image.digest} (${shape.vcpus} vCPUs, ${shape.memoryMiB} MiB)`,
      "base",
    );
    const started = performance.now();
    const layer = await host.bootTemplate({
      id: layerId(key),
      kind: "layer",
      aliases: [],
      rootfs: image.rootfs,
      shape: {
        vcpus: shape.vcpus,
        memoryMiB: shape.memoryMiB,
        ...(shape.minFreeDiskMiB !== undefined && {
          diskSizeMiB: await rootfsMiB(image.rootfs, shape.minFreeDiskMiB),
        }),
      },
      config: { key, context } satisfies LayerConfig as unknown as Record<string, unknown>,
    });
    made.add(layer.id, { image: true });
    log.add("info", `booted and captured in ${seconds(started)}`, "base");
    return { layer, context, key };
  }

  async #cached(key: string): Promise<TemplateRow | undefined> {
    const row = await this.#o.catalog.getTemplate(layerId(key));
    return row?.kind === "layer" && (row.config as { key?: string } | undefined)?.key === key
      ? row
      : undefined;
  }

  async #startVm(
    team: string,
    layer: TemplateRow,
    log: BuildLog,
    step: string,
    signal: AbortSignal,
    archives: BuildArchives,
  ): Promise<BuildVm> {
    signal.throwIfAborted();
    const started = performance.now();
    const sandbox = await this.#o.host
      .create({
        teamId: team,
        templateId: layer.id,
        timeoutMs: BUILD_VM_TTL_MS,
        metadata: {},
        envVars: {},
        lifecycle: { onTimeout: "kill", autoResume: false },
        network: { allowOut: [], denyOut: [], allowPublicTraffic: true },
        allowInternetAccess: true,
        secure: true,
        internal: true,
      })
      .catch((err: unknown) => {
        throw failure(step, err);
      });
    log.add("debug", `build VM ${sandbox.sandboxId} up in ${seconds(started)}`, step);
    const { host, accessToken } = this.#o.host.guestEndpoint(sandbox.sandboxId);
    return new BuildVm(sandbox.sandboxId, new GuestShell(host, accessToken), archives);
  }

  async #capture(
    vm: BuildVm,
    key: string,
    context: BuildContext,
    extra: Partial<LayerConfig>,
    made: MadeLayers,
  ): Promise<TemplateRow> {
    const config: LayerConfig = { key, context, ...extra };
    const layer = await this.#o.host.captureTemplate(vm.sandboxId, {
      id: layerId(key),
      kind: "layer",
      aliases: [],
      config: config as unknown as Record<string, unknown>,
    });
    made.add(layer.id);
    return layer;
  }

  /**
   * Sets the template's defaults in envd (what every sandbox of it inherits), starts the
   * start command, waits for the ready check, and captures.
   */
  async #finalize(
    vm: BuildVm,
    spec: BuildSpec,
    context: BuildContext,
    key: string,
    log: BuildLog,
    made: MadeLayers,
    signal: AbortSignal,
  ): Promise<TemplateRow> {
    await vm.shell.setDefaults(context, signal);
    // E2B's default for a start command without a ready check: give it 20 s.
    const readyCmd = spec.readyCmd ?? (spec.startCmd ? DEFAULT_READY_CMD : undefined);
    const start = spec.startCmd ? await vm.shell.start(spec.startCmd, context, signal) : undefined;
    if (start) log.add("info", `[finalize] start command: ${spec.startCmd}`, "finalize");
    const stopWaiting = new AbortController();
    try {
      if (readyCmd) {
        log.add("info", `[finalize] waiting for: ${readyCmd}`, "finalize");
        const ready = this.#waitReady(
          vm,
          readyCmd,
          context,
          AbortSignal.any([signal, stopWaiting.signal]),
        );
        ready.catch(() => {}); // lost the race to the start command's end
        const unwatched = new Promise<never>(() => {});
        const outcome = await Promise.race([
          ready.then(() => undefined),
          start?.ended ?? unwatched,
        ]);
        // A start command that ended: ready if it succeeded (E2B's rule), else the build fails.
        if (outcome && outcome.exitCode !== 0) {
          throw new StepFailed(`start command ${spec.startCmd}`, outcome);
        }
        if (outcome) log.add("info", "[finalize] the start command finished", "finalize");
        else log.add("info", "[finalize] ready", "finalize");
      }
    } finally {
      stopWaiting.abort();
      start?.detach();
    }
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const started = performance.now();
    const layer = await this.#capture(
      vm,
      key,
      context,
      {
        ...(spec.startCmd && { startCmd: spec.startCmd }),
        ...(spec.readyCmd && { readyCmd: spec.readyCmd }),
      },
      made,
    );
    log.add("info", `[finalize] captured in ${seconds(started)}`, "finalize");
    return layer;
  }

  async #waitReady(
    vm: BuildVm,
    readyCmd: string,
    context: BuildContext,
    signal: AbortSignal,
  ): Promise<void> {
    const deadline = Date.now() + this.#o.readyTimeoutMs;
    let last = "";
    for (;;) {
      signal.throwIfAborted();
      const left = deadline - Date.now();
      const result = await vm.shell.run(readyCmd, context, {
        signal,
        timeoutMs: Math.max(1_000, left),
      });
      if (result.exitCode === 0) return;
      last = result.tail;
      if (Date.now() + READY_POLL_MS > deadline) {
        throw new WarrenError(
          "build_invalid",
          `the ready check '${readyCmd}' did not pass within ${this.#o.readyTimeoutMs / 1000} s (last exit code ${result.exitCode})${last ? `:\n${last}` : ""}`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, READY_POLL_MS));
    }
  }
}

/** The build VM: a sandbox and the shell into it. */
class BuildVm {
  constructor(
    readonly sandboxId: string,
    readonly shell: GuestShell,
    readonly archives: BuildArchives,
  ) {}

  io(log: BuildLog, step: string, signal: AbortSignal, timeoutMs: number) {
    return {
      shell: this.shell,
      files: (hash: string) => this.archives.read(hash),
      onLine: (line: string) => log.add("info", line, step),
      signal,
      timeoutMs,
    };
  }
}

const DEFAULT_CONTEXT: BuildContext = { user: "user", envVars: {} };

/** The context a template's sandboxes start in: a build's own, else E2B's defaults. */
function contextOf(template: TemplateRow): BuildContext {
  const config = template.config as Partial<LayerConfig> | undefined;
  return config?.context ?? DEFAULT_CONTEXT;
}

export function isBaseImage(reference: string): boolean {
  const name = reference.replace(/^docker\.io\//, "").replace(/:latest$/, "");
  return name === BASE_IMAGE;
}

/**
 * A step's layer is found by its parent's key, its definition and, for a COPY, the SHA-256
 * of its archive's bytes (`archive`): two uploads under one files hash are two layers.
 */
export function cacheKey(parent: string, step: NumberedStep, archive?: string): string {
  const { number: _number, force: _force, ...definition } = step;
  const text = JSON.stringify(definition);
  return archive === undefined ? digest(parent, text) : digest(parent, text, archive);
}

/** The key a team's step layers chain from: its source's, and the team. */
export function teamKey(sourceKey: string, team: string): string {
  return digest("team", team, sourceKey);
}

export function layerId(key: string): string {
  return `l${key.slice(0, 19)}`;
}

function digest(...parts: string[]): string {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(`${part.length}:${part}`);
  return hash.digest("hex");
}

function describe(step: NumberedStep): string {
  switch (step.type) {
    case "RUN":
      return `RUN ${step.user ? `(as ${step.user}) ` : ""}${step.command}`;
    case "COPY":
      return `COPY ${step.src} ${step.dest}`;
    case "WORKDIR":
      return `WORKDIR ${step.path}`;
    case "USER":
      return `USER ${step.user}`;
    case "ENV":
      return `ENV ${Object.keys(step.vars).join(" ")}`;
  }
}

function failure(step: string, err: unknown): BuildFailed {
  if (err instanceof BuildFailed) return err;
  if (err instanceof StepFailed) return new BuildFailed(step, err.message);
  const error = toWarrenError(err);
  return new BuildFailed(step, error.message);
}

function seconds(since: number): string {
  return `${((performance.now() - since) / 1000).toFixed(1)} s`;
}

async function rootfsMiB(rootfs: string, freeMiB: number): Promise<number> {
  return Math.ceil((await stat(rootfs)).size / 1024 / 1024) + freeMiB;
}
