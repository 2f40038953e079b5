import { cp, lstat, readdir, rename, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { HandlerContext, ServiceImpl } from "@connectrpc/connect";
import { EventType, type Filesystem } from "../../protocol/gen/filesystem/filesystem_pb.js";
import { AsyncQueue, toWarrenError, WarrenError } from "../../shared/index.js";
import { KEEPALIVE, keepaliveIntervalMs, withKeepalive } from "../keepalive.js";
import { makeOwnedDirs, makeOwnedParentDirs } from "../owned-dirs.js";
import { resolvePath } from "../paths.js";
import { requestUser } from "../request-user.js";
import type { AgentState } from "../state.js";
import type { UserAccount } from "../users.js";
import { DirWatcher, type WatchEvent } from "./dir-watcher.js";
import { type EntryInit, entryInfo } from "./entry-info.js";
import { checkWatchable, type WatchRegistry } from "./watch-registry.js";

const ENTRY_EVENT_TYPES = new Set([EventType.CREATE, EventType.WRITE, EventType.CHMOD]);

async function eventMessage(event: WatchEvent, includeEntry: boolean) {
  const entry =
    includeEntry && ENTRY_EVENT_TYPES.has(event.type)
      ? await entryInfo(event.path).catch(() => undefined)
      : undefined;
  return { name: event.name, type: event.type, entry };
}

/** Lists `dir` in Go's filepath.WalkDir order: by name, each directory followed by its children. */
async function walk(dir: string, depth: number, out: EntryInit[]): Promise<void> {
  const names = (await readdir(dir)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  for (const name of names) {
    const path = join(dir, name);
    const entry = await entryInfo(path).catch((err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") return undefined; // removed while listing
      throw err;
    });
    if (!entry) continue;
    out.push(entry);
    if (depth > 1 && (await lstat(path)).isDirectory()) await walk(path, depth - 1, out);
  }
}

/** Renames, or copies then removes across filesystems; parents made as the user's. */
async function movePath(source: string, destination: string, user: UserAccount): Promise<void> {
  await lstat(source).catch(() => {
    throw new WarrenError("not_found", `source file not found: '${source}'`);
  });
  try {
    await makeOwnedParentDirs(destination, user);
    await rename(source, destination).catch(async (err: NodeJS.ErrnoException) => {
      if (err.code !== "EXDEV") throw err;
      await cp(source, destination, {
        recursive: true,
        preserveTimestamps: true,
        verbatimSymlinks: true,
      });
      await rm(source, { recursive: true, force: true });
    });
  } catch (err) {
    throw toWarrenError(err, `cannot move '${source}' to '${destination}'`);
  }
}

/** A directory's entries down to `depth` levels, in WalkDir order. */
async function listEntries(path: string, depth: number): Promise<EntryInit[]> {
  const info = await stat(path).catch((err) => {
    throw toWarrenError(err, `cannot list '${path}'`);
  });
  if (!info.isDirectory())
    throw new WarrenError("invalid_argument", `path '${path}' is not a directory`);
  const entries: EntryInit[] = [];
  try {
    await walk(path, depth, entries);
  } catch (err) {
    throw toWarrenError(err, `cannot list '${path}'`);
  }
  return entries;
}

/** WatchDir's stream: start, then each event (or a keepalive) until the client goes. */
async function* watchStream(
  path: string,
  req: { recursive: boolean; includeEntry: boolean; allowNetworkMounts: boolean },
  ctx: HandlerContext,
) {
  await checkWatchable({ path, allowNetworkMounts: req.allowNetworkMounts });
  const queue = new AsyncQueue<WatchEvent>();
  const watcher = new DirWatcher(path, req.recursive, (event) => queue.push(event));
  try {
    yield { event: { case: "start" as const, value: {} } };
    const interval = keepaliveIntervalMs(ctx.requestHeader);
    for await (const item of withKeepalive(queue.iterate(ctx.signal), interval, ctx.signal)) {
      if (item === KEEPALIVE) yield { event: { case: "keepalive" as const, value: {} } };
      else
        yield {
          event: {
            case: "filesystem" as const,
            value: await eventMessage(item, req.includeEntry),
          },
        };
    }
  } finally {
    watcher.close();
    queue.close();
  }
}

/** `filesystem.Filesystem`: inspect and change the guest's files; watch directories. */
export function createFilesystemService(
  state: AgentState,
  watchers: WatchRegistry,
): ServiceImpl<typeof Filesystem> {
  const resolve = (path: string, headers: Headers) => {
    const user = requestUser(state, headers);
    return { user, path: resolvePath(path, user, state.defaultWorkdir) };
  };

  const describe = async (path: string) => {
    try {
      return await entryInfo(path);
    } catch (err) {
      throw toWarrenError(err, `cannot stat '${path}'`);
    }
  };

  return {
    async stat(req, ctx) {
      const { path } = resolve(req.path, ctx.requestHeader);
      return { entry: await describe(path) };
    },

    async makeDir(req, ctx) {
      const { user, path } = resolve(req.path, ctx.requestHeader);
      const existing = await stat(path).catch(() => undefined);
      if (existing?.isDirectory())
        throw new WarrenError("already_exists", `directory '${path}' already exists`);
      if (existing)
        throw new WarrenError("invalid_argument", `path '${path}' exists and is not a directory`);
      try {
        await makeOwnedDirs(path, user);
      } catch (err) {
        throw toWarrenError(err, `cannot create directory '${path}'`);
      }
      return { entry: await describe(path) };
    },

    async move(req, ctx) {
      const { user, path: source } = resolve(req.source, ctx.requestHeader);
      const { path: destination } = resolve(req.destination, ctx.requestHeader);
      await movePath(source, destination, user);
      return { entry: await describe(destination) };
    },

    async listDir(req, ctx) {
      const { path } = resolve(req.path, ctx.requestHeader);
      return { entries: await listEntries(path, Math.max(req.depth, 1)) };
    },

    async remove(req, ctx) {
      const { path } = resolve(req.path, ctx.requestHeader);
      try {
        await rm(path, { recursive: true, force: true });
      } catch (err) {
        throw toWarrenError(err, `cannot remove '${path}'`);
      }
      return {};
    },

    async *watchDir(req, ctx) {
      const { path } = resolve(req.path, ctx.requestHeader);
      yield* watchStream(path, req, ctx);
    },

    async createWatcher(req, ctx) {
      const { path } = resolve(req.path, ctx.requestHeader);
      const watcherId = await watchers.create({
        path,
        recursive: req.recursive,
        includeEntry: req.includeEntry,
        allowNetworkMounts: req.allowNetworkMounts,
      });
      return { watcherId };
    },

    async getWatcherEvents(req) {
      const { events, includeEntry } = watchers.take(req.watcherId);
      return { events: await Promise.all(events.map((e) => eventMessage(e, includeEntry))) };
    },

    removeWatcher(req) {
      watchers.remove(req.watcherId);
      return {};
    },
  };
}
