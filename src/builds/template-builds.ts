/**
 * The E2B template build API's behaviour, framework-free (the API turns HTTP into these
 * calls): request a build, upload its files, start it, watch its status and logs; list,
 * find, tag and delete templates. Builds run in the background, one `Builder` run each.
 */
import { join } from "node:path";
import type { Readable } from "node:stream";
import {
  type BuildRow,
  type Catalog,
  DEFAULT_TEAM_ID,
  type TeamLimits,
  type TemplateRow,
} from "../catalog/index.js";
import {
  DiskSpace,
  type EventListener,
  type EventSource,
  LifecycleEvents,
  lookupTemplate,
  newId,
  reservedName,
  type StatDisk,
  visibleTo,
} from "../orchestrator/index.js";
import { ENVD_VERSION } from "../protocol/index.js";
import { type Logger, Quota, WarrenError } from "../shared/index.js";
import { BuildFiles, type OpenedArchive } from "./build-files.js";
import { BuildLog, type LogEntry, type LogLevel } from "./build-log.js";
import {
  type BuildArchives,
  Builder,
  BuildFailed,
  type BuildHost,
  type BuildShape,
  MadeLayers,
} from "./builder.js";
import { DEFAULT_TAG, parseName } from "./names.js";
import { type BuildSpec, InvalidStep, parseBuildSpec } from "./spec.js";
import {
  findBuiltTemplate,
  ownedBy,
  pointTag,
  TemplateTags,
  templateRow,
} from "./template-tags.js";
import type { ImageSource } from "./types.js";
import {
  type BuildInfo,
  type RequestedBuild,
  summary,
  type TemplateDetail,
  type TemplateSummary,
} from "./views.js";

export interface TemplateBuildsOptions {
  readonly catalog: Catalog;
  readonly host: BuildHost & { deleteTemplate(templateId: string, teamId?: string): Promise<void> };
  readonly images?: ImageSource;
  /** Holds `files/` (uploaded archives) and `logs/` (one log per build). */
  readonly dir: string;
  readonly logger: Logger;
  /** Largest single upload. */
  readonly uploadLimitBytes: number;
  /**
   * Most bytes the uploads of one team's templates may hold on disk (`upload bytes` quota);
   * a team's `maxUploadBytes` may lower it. Default none.
   */
  readonly uploadQuotaBytes?: number;
  /** A team's limits (its builds in flight, its upload bytes); unset: none. */
  readonly teamLimits?: (teamId: string) => Promise<TeamLimits | undefined>;
  /** How long an upload is kept after its last use (BuildFiles.collect). Default 1 day. */
  readonly uploadRetentionMs?: number;
  /** Free disk (MiB) uploads and builds never eat into (DiskSpace); 0 or unset: off. */
  readonly diskReserveMiB?: number;
  /** statfs of `dir` (tests pass their own). */
  readonly statDisk?: StatDisk;
  readonly stepTimeoutMs: number;
  readonly readyTimeoutMs: number;
  /** Largest cpuCount and memoryMB a build may ask for. */
  readonly maxVcpus: number;
  readonly maxMemoryMiB: number;
}

export interface BuildRequest {
  readonly name: string;
  readonly tags?: readonly string[];
  readonly cpuCount?: number;
  readonly memoryMB?: number;
  readonly minFreeDiskMb?: number;
}

/** The status call returns at most this many log entries (the SDK polls until none come). */
const STATUS_LOG_LIMIT = 100;
const MAX_LOGS_LIMIT = 100;
const KEPT_LOGS = 32;
const DEFAULT_UPLOAD_RETENTION_MS = 24 * 60 * 60 * 1000;
/** Uploads are swept at least this far apart, and at most (retention permitting) this. */
const SWEEP_MIN_MS = 60_000;
const SWEEP_MAX_MS = 60 * 60 * 1000;
const MiB = 1024 * 1024;

export class TemplateBuilds implements EventSource {
  readonly #o: TemplateBuildsOptions;
  /** Aliases and tags (`/templates/aliases`, `/templates/tags`). */
  readonly tags: TemplateTags;
  /** `build.ready`, `build.failed` (the orchestrator's events.ts). */
  readonly #events: LifecycleEvents;
  readonly #files: BuildFiles;
  readonly #disk: DiskSpace;
  readonly #builder: Builder;
  #sweep: NodeJS.Timeout | undefined;
  readonly #logsDir: string;
  /**
   * Logs of running builds and of the last KEPT_LOGS finished ones (the SDK polls a finished
   * build's log once more); older ones are read from disk.
   */
  readonly #logs = new Map<string, BuildLog>();
  /** Shapes of requested builds, until they start. */
  readonly #requested = new Map<string, BuildShape>();
  readonly #running = new Map<
    string,
    { abort: AbortController; done: Promise<void>; team: string }
  >();
  /** Each template's team, for whose quota its uploads count (read at start, kept by requestBuild). */
  readonly #teamOf = new Map<string, string>();
  /** Builds past the builds quota's check, not yet running: they count as in flight. */
  readonly #starting = new Map<string, string>();
  /** Teams' `maxUploadBytes`, as last read (an upload link is asked for before each upload). */
  readonly #uploadLimits = new Map<string, number>();

  constructor(options: TemplateBuildsOptions) {
    this.tags = new TemplateTags(options.catalog);
    this.#o = options;
    this.#events = new LifecycleEvents({ logger: options.logger, catalog: options.catalog });
    this.#disk = new DiskSpace(options.dir, options.diskReserveMiB ?? 0, options.statDisk);
    this.#files = new BuildFiles({
      dir: join(options.dir, "files"),
      maxBytes: options.uploadLimitBytes,
      quota: new Quota(
        "upload bytes",
        (team) =>
          Math.min(
            options.uploadQuotaBytes ?? Number.POSITIVE_INFINITY,
            this.#uploadLimits.get(team) ?? Number.POSITIVE_INFINITY,
          ),
        "WARREN_BUILD_UPLOADS_MAX_MIB, or the team's maxUploadBytes",
      ),
      // Uploads count against the team of the template they are for.
      ownerOf: (templateId) => this.#teamOf.get(templateId) ?? DEFAULT_TEAM_ID,
      disk: this.#disk,
    });
    this.#logsDir = join(options.dir, "logs");
    this.#builder = new Builder({
      catalog: options.catalog,
      host: options.host,
      images: options.images,
      logger: options.logger,
      stepTimeoutMs: options.stepTimeoutMs,
      readyTimeoutMs: options.readyTimeoutMs,
    });
  }

  /**
   * Builds an earlier process left unfinished failed: their VMs died with it. Uploads unused
   * for the retention are collected, now and from then on; the rest count against the quota.
   */
  async start(): Promise<void> {
    for (const build of await this.#o.catalog.listBuilds()) {
      this.#teamOf.set(build.templateId, build.teamId);
      if (build.status !== "building" && build.status !== "waiting") continue;
      await this.#finish(build, {
        status: "error",
        reason: { message: "the server restarted before the build finished: build again" },
      });
    }
    const retentionMs = this.#o.uploadRetentionMs ?? DEFAULT_UPLOAD_RETENTION_MS;
    await this.#files.collect(retentionMs);
    await this.#files.recount();
    clearInterval(this.#sweep);
    this.#sweep = setInterval(
      () => {
        this.#files.collect(retentionMs).catch((err: unknown) => {
          this.#o.logger.warn({ err }, "build.upload_sweep_failed");
        });
      },
      Math.min(Math.max(retentionMs, SWEEP_MIN_MS), SWEEP_MAX_MS),
    );
    this.#sweep.unref();
  }

  /** Builds ending, as they end: the node's metrics follow them. */
  onEvent(listener: EventListener): () => void {
    return this.#events.onEvent(listener);
  }

  /** Stops running builds (each cleans up as a failed build does). */
  async close(): Promise<void> {
    clearInterval(this.#sweep);
    for (const run of this.#running.values()) run.abort.abort(new Error("the server is stopping"));
    await Promise.all([...this.#running.values()].map((run) => run.done));
  }

  /**
   * Every method takes the team it acts for (`team`): it sees and changes only that team's
   * templates and builds (another team's read as not found, ids and names alike: names are
   * per team) and the shared ones (`base`). Undefined is the admin's view: every team's by
   * id, names in the default team's namespace. A build is always some team's.
   */
  async requestBuild(team: string, request: BuildRequest): Promise<RequestedBuild> {
    const { catalog, host } = this.#o;
    const { name, tags } = parseName(request.name, request.tags);
    // Names are per team: only the team's own templates, its builds and the built-in names
    // count; another team's `name` is neither in the way nor told of.
    const reserved = await reservedName(catalog, name, team);
    if (reserved) throw new WarrenError("template_name_taken", reserved);
    const existing = await catalog.getTemplate(name, team);
    if (existing && existing.kind !== "build") {
      throw new WarrenError("template_name_taken", `'${name}' is a snapshot: choose another name`);
    }
    const builds = (await catalog.listBuilds()).filter((b) => b.teamId === team);
    // Every build of a name builds one template, also before the first one succeeded.
    const earlier = existing ? undefined : builds.find((b) => b.name === name);
    const templateId = existing?.id ?? earlier?.templateId ?? newId();
    const explicit = request.cpuCount !== undefined || request.memoryMB !== undefined;
    const shape: BuildShape = {
      vcpus:
        this.#integer("cpuCount", request.cpuCount, 1, this.#o.maxVcpus) ??
        host.templateShape.vcpus,
      memoryMiB:
        this.#integer("memoryMB", request.memoryMB, 128, this.#o.maxMemoryMiB) ??
        host.templateShape.memoryMiB,
      explicit,
      // A template's disk is thin: bounded by what this node could ever hold, not by what
      // it has free now (which creates and builds are admitted by).
      ...(request.minFreeDiskMb !== undefined && {
        minFreeDiskMiB: this.#integer(
          "minFreeDiskMb",
          request.minFreeDiskMb,
          1,
          this.#disk.ceilingMiB(),
        ),
      }),
    };
    const now = new Date().toISOString();
    this.#teamOf.set(templateId, team);
    const build: BuildRow = {
      id: crypto.randomUUID(),
      teamId: team,
      templateId,
      name,
      tags,
      status: "waiting",
      vcpus: shape.vcpus,
      memoryMiB: shape.memoryMiB,
      diskSizeMiB: 0,
      layers: [],
      createdAt: now,
      updatedAt: now,
    };
    await catalog.putBuild(build);
    this.#requested.set(build.id, shape);
    return {
      templateID: templateId,
      buildID: build.id,
      names: [name],
      tags: [...tags],
      aliases: [name],
      public: false,
    };
  }

  /**
   * Whether this template's COPY files with `hash` are here, else where to PUT them
   * (`baseUrl` + signed path). Another template's upload under the same hash does not count.
   */
  async fileUploadLink(
    team: string | undefined,
    reference: string,
    hash: string,
    baseUrl: string,
  ): Promise<{ present: boolean; url?: string }> {
    const { row, builds } = await findBuiltTemplate(this.#o.catalog, reference, team);
    const templateId = row?.id ?? builds[0]?.templateId ?? reference;
    const owner = this.#teamOf.get(templateId) ?? row?.teamId ?? DEFAULT_TEAM_ID;
    const limit = (await this.#o.teamLimits?.(owner))?.maxUploadBytes;
    if (limit === undefined) this.#uploadLimits.delete(owner);
    else this.#uploadLimits.set(owner, limit);
    if (await this.#files.has(templateId, hash)) return { present: true };
    const query = this.#files.signedQuery(templateId, hash);
    return {
      present: false,
      url: `${baseUrl}/templates/${encodeURIComponent(templateId)}/files/${hash}?${query}`,
    };
  }

  /**
   * Stores an upload made through a link `fileUploadLink` signed: within the size limit,
   * the `upload bytes` quota and the disk reserve, and matching its Content-Digest if sent.
   */
  acceptUpload(
    templateId: string,
    hash: string,
    link: { expires?: string; signature?: string },
    body: Readable,
    options: { declaredBytes?: number; contentDigest?: string } = {},
  ): Promise<void> {
    return this.#files.accept(templateId, hash, link, body, options);
  }

  /** Starts a requested build in the background; its progress is the status call's. */
  async startBuild(
    team: string | undefined,
    templateId: string,
    buildId: string,
    definition: unknown,
  ): Promise<void> {
    const build = await this.#build(templateId, buildId, team);
    if (build.status !== "waiting" || this.#running.has(buildId)) {
      throw new WarrenError("build_in_progress", `build ${buildId} was already started`);
    }
    let spec: BuildSpec;
    try {
      spec = parseBuildSpec(definition);
    } catch (err) {
      if (!(err instanceof InvalidStep)) throw err;
      // Taken, then failed at that step, as E2B does: the SDK's BuildError points at the call.
      const log = BuildLog.create(this.#logsDir, buildId);
      try {
        await this.#fail(
          build,
          new BuildFailed(String(err.step), err.message),
          new MadeLayers(),
          log,
        );
      } finally {
        log.close();
      }
      return;
    }
    const maxBuilds = (await this.#o.teamLimits?.(build.teamId))?.maxBuilds;
    const inFlight =
      [...this.#running.values()].filter((r) => r.team === build.teamId).length +
      [...this.#starting.values()].filter((t) => t === build.teamId).length;
    if (maxBuilds !== undefined && inFlight >= maxBuilds) {
      throw new WarrenError(
        "quota_exceeded",
        `team ${build.teamId} is at its quota of builds in flight: ${inFlight} building, limit ${maxBuilds}; wait for one to finish`,
      );
    }
    // Counted from here, before the first wait: two starts cannot both take the last place.
    this.#starting.set(buildId, build.teamId);
    try {
      await this.#launch(build, templateId, spec);
    } finally {
      this.#starting.delete(buildId);
    }
  }

  async #launch(build: BuildRow, templateId: string, spec: BuildSpec): Promise<void> {
    const buildId = build.id;
    const shape = this.#requested.get(buildId) ?? {
      vcpus: build.vcpus,
      memoryMiB: build.memoryMiB,
      explicit: true,
    };
    // Each capture writes the build VM's memory.
    this.#disk.admit("starting the build", shape.memoryMiB * MiB);
    const archives = await this.#openArchives(build.templateId, spec.steps);
    const running = { ...build, status: "building" as const, updatedAt: new Date().toISOString() };
    let log: BuildLog;
    try {
      log = BuildLog.create(this.#logsDir, buildId);
      await this.#o.catalog.putBuild(running);
    } catch (err) {
      await archives.close();
      throw err;
    }
    this.#requested.delete(buildId);
    this.#logs.set(buildId, log);
    const abort = new AbortController();
    const made = new MadeLayers();
    const done = (async () => {
      const started = performance.now();
      log.add("info", `Building template ${build.name} (${templateId}), build ${buildId}`);
      try {
        const layer = await this.#builder.run(
          build.teamId,
          spec,
          shape,
          log,
          made,
          abort.signal,
          archives,
        );
        await this.#publish(running, layer, made);
        log.add("info", `Build finished in ${((performance.now() - started) / 1000).toFixed(1)} s`);
      } catch (err) {
        await this.#fail(running, err, made, log);
      } finally {
        await archives.close();
        log.close();
        this.#running.delete(buildId);
        this.#forgetOldLogs();
      }
    })();
    this.#running.set(buildId, { abort, done, team: build.teamId });
  }

  async status(
    team: string | undefined,
    templateId: string,
    buildId: string,
    logsOffset = 0,
  ): Promise<BuildInfo> {
    const build = await this.#build(templateId, buildId, team);
    const log = this.#log(buildId);
    return {
      templateID: build.templateId,
      buildID: build.id,
      status: build.status,
      logEntries: log.from(logsOffset, STATUS_LOG_LIMIT),
      logs: [],
      ...(build.reason && {
        reason: { ...build.reason, logEntries: log.tail(20) },
      }),
    };
  }

  async logs(
    team: string | undefined,
    templateId: string,
    buildId: string,
    query: { cursor?: number; limit?: number; direction?: string; level?: string },
  ): Promise<{ logs: LogEntry[] }> {
    await this.#build(templateId, buildId, team);
    const direction = query.direction ?? "forward";
    if (direction !== "forward" && direction !== "backward") {
      throw new WarrenError("invalid_argument", "direction must be forward or backward");
    }
    const levels = ["debug", "info", "warn", "error"];
    if (query.level !== undefined && !levels.includes(query.level)) {
      throw new WarrenError("invalid_argument", `level must be one of ${levels.join(", ")}`);
    }
    return {
      logs: this.#log(buildId).query({
        cursor: query.cursor,
        limit: Math.min(query.limit ?? MAX_LOGS_LIMIT, MAX_LOGS_LIMIT),
        direction,
        level: query.level as LogLevel | undefined,
      }),
    };
  }

  /** Every template a client can use or is building: built, snapshots and base. */
  async list(team: string | undefined): Promise<TemplateSummary[]> {
    const { catalog } = this.#o;
    const builds = (await catalog.listBuilds()).filter((b) => ownedBy(b, team));
    const rows = (await catalog.listTemplates()).filter(
      (t) => t.kind !== "layer" && visibleTo(t, team),
    );
    const byTemplate = groupBy(builds, (b) => b.templateId);
    const summaries = rows.map((row) => summary(row, byTemplate.get(row.id) ?? []));
    // Templates whose first build has not succeeded yet.
    const known = new Set(rows.map((r) => r.id));
    for (const [templateId, own] of byTemplate) {
      if (!known.has(templateId)) summaries.push(summary(undefined, own));
    }
    return summaries;
  }

  async get(team: string | undefined, templateId: string): Promise<TemplateDetail> {
    const { row, builds } = await findBuiltTemplate(this.#o.catalog, templateId, team);
    const first = row?.createdAt ?? builds[0]?.createdAt ?? new Date().toISOString();
    const names = row ? [...row.aliases] : builds.slice(-1).map((b) => b.name);
    return {
      templateID: row?.id ?? templateId,
      public: false,
      aliases: names,
      names,
      createdAt: first,
      updatedAt: builds.at(-1)?.updatedAt ?? first,
      lastSpawnedAt: null,
      spawnCount: 0,
      builds: builds.map((b) => ({
        buildID: b.id,
        status: b.status,
        createdAt: b.createdAt,
        updatedAt: b.updatedAt,
        ...(b.finishedAt && { finishedAt: b.finishedAt }),
        cpuCount: b.vcpus,
        memoryMB: b.memoryMiB,
        diskSizeMB: b.diskSizeMiB,
        envdVersion: ENVD_VERSION,
      })),
    };
  }

  /**
   * Deletes a template by id or name: a built one with its builds, tags and the layers no
   * other build uses; others (snapshots) as the orchestrator deletes them.
   */
  async delete(team: string | undefined, reference: string): Promise<void> {
    const { catalog, host } = this.#o;
    const found = await lookupTemplate(catalog, reference.replace(/:default$/, ""), team);
    const row = found && visibleTo(found, team) ? found : undefined;
    const builds = (await catalog.listBuilds(row?.id ?? reference)).filter((b) => ownedBy(b, team));
    if (found && !row) {
      throw new WarrenError("template_not_found", `template '${reference}' not found`);
    }
    if (row?.kind !== "build" && builds.length === 0) return host.deleteTemplate(reference, team);
    const templateId = row?.id ?? reference;
    for (const build of builds) {
      if (this.#running.has(build.id)) {
        throw new WarrenError(
          "build_in_progress",
          `build ${build.id} of ${templateId} is running: wait for it to finish`,
        );
      }
    }
    if (row) await host.dropTemplate(row);
    for (const tag of await catalog.listTags(templateId))
      await catalog.deleteTag(templateId, tag.tag);
    const others = (await catalog.listBuilds()).filter((b) => b.templateId !== templateId);
    const stillUsed = new Set(others.flatMap((b) => b.layers));
    for (const build of builds) {
      await this.#dropLayers(build.layers.filter((id) => !stillUsed.has(id)));
      await catalog.deleteBuild(build.id);
    }
    await this.#files.drop(templateId);
  }

  // ---- internals ----------------------------------------------------------------------------

  /**
   * The template's archives of the build's COPY steps, opened for the build's life (a
   * re-upload or a collection meanwhile does not take them away), or build_invalid naming
   * the first step whose files were not uploaded.
   */
  async #openArchives(
    templateId: string,
    steps: ReturnType<typeof parseBuildSpec>["steps"],
  ): Promise<BuildArchives & { close(): Promise<void> }> {
    const opened = new Map<string, OpenedArchive>();
    const close = async () => {
      for (const archive of opened.values()) await archive.handle.close().catch(() => {});
    };
    try {
      for (const step of steps) {
        if (step.type !== "COPY" || opened.has(step.filesHash)) continue;
        const archive = await this.#files.open(templateId, step.filesHash).catch(() => {
          throw new WarrenError(
            "build_invalid",
            `step ${step.number} (COPY ${step.src}): its files (hash ${step.filesHash}) were not uploaded`,
          );
        });
        opened.set(step.filesHash, archive);
      }
    } catch (err) {
      await close();
      throw err;
    }
    const get = (hash: string) => {
      const archive = opened.get(hash);
      if (!archive) throw new WarrenError("internal", `no archive was opened for ${hash}`);
      return archive;
    };
    return {
      digest: (hash) => get(hash).digest,
      // Positional reads: every stream reads the whole file, however many there are.
      read: (hash) => get(hash).handle.createReadStream({ start: 0, autoClose: false }),
      close,
    };
  }

  /** A successful build: its tags point at it (the template row follows `default`). */
  async #publish(build: BuildRow, layer: TemplateRow, made: MadeLayers): Promise<void> {
    const { catalog } = this.#o;
    await this.#finish(build, {
      status: "ready",
      snapshotId: layer.snapshotId,
      diskSizeMiB: layer.diskSizeMiB,
      layers: made.ids,
    });
    // A first build that is not `default` still makes the template (sandboxes need a
    // snapshot); a `default` build puts it below.
    const isDefault = build.tags.includes(DEFAULT_TAG);
    if (!isDefault && !(await catalog.getTemplate(build.templateId))) {
      await catalog.putTemplate(templateRow(build, layer));
    }
    for (const tag of build.tags) await pointTag(this.#o.catalog, build, tag, layer);
    const durationMs = Date.now() - Date.parse(build.createdAt);
    this.#events.emit("build.ready", { buildId: build.id, name: build.name, durationMs });
  }

  async #fail(build: BuildRow, err: unknown, made: MadeLayers, log: BuildLog): Promise<void> {
    const step = err instanceof BuildFailed ? err.step : undefined;
    const message = err instanceof Error ? err.message : String(err);
    log.add("error", `Build failed${step ? ` at step ${step}` : ""}: ${message}`, step);
    this.#events.emit("build.failed", { buildId: build.id, step, message });
    // Nothing of a failed build stays: the layers it made go (the cache keeps what it found,
    // and an image's boot); the row keeps the rest, for deleting the template.
    const dropped = made.droppedOnFailure();
    await this.#dropLayers(dropped);
    await this.#finish(build, {
      status: "error",
      layers: made.ids.filter((id) => !dropped.includes(id)),
      reason: { message, ...(step !== undefined && { step }) },
    });
  }

  async #dropLayers(ids: readonly string[]): Promise<void> {
    for (const id of ids) {
      const layer = await this.#o.catalog.getTemplate(id);
      if (!layer) continue;
      await this.#o.host.dropTemplate(layer).catch((err: unknown) => {
        this.#o.logger.warn({ layer: id, err }, "build.layer_drop_failed");
      });
    }
  }

  async #finish(build: BuildRow, patch: Partial<BuildRow>): Promise<BuildRow> {
    const now = new Date().toISOString();
    const row = { ...build, ...patch, updatedAt: now, finishedAt: now };
    await this.#o.catalog.putBuild(row);
    return row;
  }

  async #build(templateId: string, buildId: string, team: string | undefined): Promise<BuildRow> {
    const build = await this.#o.catalog.getBuild(buildId);
    const matches = build && (build.templateId === templateId || build.name === templateId);
    if (!build || !matches || !ownedBy(build, team)) {
      throw new WarrenError("build_not_found", `template ${templateId} has no build ${buildId}`);
    }
    return build;
  }

  /** Keeps the logs of running builds and of the newest finished ones in memory. */
  #forgetOldLogs(): void {
    let finished = [...this.#logs.keys()].filter((id) => !this.#running.has(id)).length;
    for (const id of this.#logs.keys()) {
      if (finished <= KEPT_LOGS) return;
      if (this.#running.has(id)) continue;
      this.#logs.delete(id);
      finished--;
    }
  }

  #log(buildId: string): BuildLog {
    return this.#logs.get(buildId) ?? BuildLog.load(this.#logsDir, buildId);
  }

  #integer(field: string, value: number | undefined, min: number, max: number) {
    if (value === undefined) return undefined;
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new WarrenError(
        "invalid_argument",
        `${field} must be an integer from ${min} to ${max}, got ${value}`,
      );
    }
    return value;
  }
}

function groupBy<T>(items: readonly T[], key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const group = groups.get(key(item));
    if (group) group.push(item);
    else groups.set(key(item), [item]);
  }
  return groups;
}
