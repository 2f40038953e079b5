import { randomUUID } from "node:crypto";
import { chmod, chown, mkdir, rm } from "node:fs/promises";
import { join } from "node:path";
import type { VolumeCatalog, VolumeRow } from "../catalog/index.js";
import { WarrenError } from "../shared/index.js";
import { DiskReserve } from "./disk-reserve.js";
import { type GuestIds, shiftVolumeOwners } from "./guest-ids.js";
import type { NfsExport } from "./nfs-export.js";
import { VolumeQuota } from "./quota.js";
import { VolumeFiles } from "./volume-files.js";
import { issueVolumeToken, newVolumeKey, tokenRefusal } from "./volume-tokens.js";

/** E2B's volume name rule. */
const NAME = /^[a-zA-Z0-9_-]+$/;
const MAX_NAME_LENGTH = 128;
/** Volume ids are UUIDs; anything else cannot name one (and never reaches the disk). */
const VOLUME_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

export interface VolumesOptions {
  readonly catalog: VolumeCatalog;
  /** Where volumes' directories live (`<data>/volumes`; shared storage in a cluster). */
  readonly dir: string;
  /** The sandboxes (paused ones too) that mount the volume, on any node: they block its destroy. */
  readonly mountedBy?: (volumeId: string) => Promise<string[]>;
  /** The team's `maxVolumeBytes` (the team catalog); unset: no quota. */
  readonly limitOf?: (teamId: string) => Promise<number | undefined>;
  /**
   * Free space volume writes leave on `dir`'s filesystem (WARREN_DISK_RESERVE_MIB, whose
   * default this is too: 2048); 0: no check. Below it NFS writes get NOSPC and the content
   * API 507 disk_pressure.
   */
  readonly diskReserveMiB?: number;
  /** Free bytes on `dir`'s filesystem (default: statfs); tests simulate a full disk. */
  readonly freeBytes?: (dir: string) => number;
  /** How long a content API token works after it was handed out; default 7 days. */
  readonly tokenTtlMs?: number;
  /** The clock tokens are issued and checked by; tests move it. */
  readonly now?: () => number;
  /**
   * Volumes' owners in the guest id range (WARREN_GUEST_ID_BASE), as the guest services
   * process's user namespace reaches them: `dir` and each volume's root are the range's root's.
   * Unset: raw ids (development, tests without root).
   */
  readonly ids?: GuestIds;
}

/** A content API token's life: a `Volume` the SDK holds never asks for another. */
const TOKEN_TTL_MS = 7 * 24 * 3_600_000;

/** A volume as the API answers for it: E2B's `VolumeAndToken`, the token fresh. */
export interface VolumeWithToken {
  readonly row: VolumeRow;
  readonly token: string;
}

/** WARREN_DISK_RESERVE_MIB's default. */
const DISK_RESERVE_MIB = 2048;

/**
 * The node's volumes: rows in the catalog, one directory each under `dir`. `dir` itself is
 * root's and 0700: a volume holds whatever owners and modes its sandboxes set (set-uid
 * files too), which no other account of the host may reach.
 */
export class Volumes {
  readonly #o: VolumesOptions;
  readonly #quota: VolumeQuota | undefined;
  readonly #disk: DiskReserve;

  constructor(options: VolumesOptions) {
    this.#o = options;
    this.#disk = new DiskReserve({
      dir: options.dir,
      reserveMiB: options.diskReserveMiB ?? DISK_RESERVE_MIB,
      ...(options.freeBytes && { freeBytes: options.freeBytes }),
    });
    const { limitOf } = options;
    this.#quota =
      limitOf &&
      new VolumeQuota({
        limitOf,
        rootsOf: async (teamId) => (await this.list(teamId)).map((row) => this.#root(row.id)),
      });
  }

  /** What the team's volumes hold, in disk bytes, as last measured (0 without a quota). */
  bytesUsed(teamId: string): number {
    return this.#quota?.used(teamId) ?? 0;
  }

  /** Whether the team may add `bytes` (counted if so): for writers that cannot wait. */
  #admitter(teamId: string): (bytes: number) => boolean {
    const quota = this.#quota;
    return quota ? (bytes) => quota.admit(teamId, bytes) : () => true;
  }

  async create(teamId: string, name: string): Promise<VolumeRow> {
    checkName(name);
    const row: VolumeRow = {
      id: randomUUID(),
      teamId,
      name,
      tokenKey: newVolumeKey(),
      createdAt: new Date().toISOString(),
    };
    await this.#ensureDir();
    const root = this.#root(row.id);
    // Any user of the guests that mount it may write at its top (git clone, pip --target as
    // the sandbox's `user`): a volume is its team's, and so are its guests' users.
    await mkdir(root, { mode: 0o777 });
    await chmod(root, 0o777);
    const ids = this.#o.ids;
    if (ids) await chown(root, ids.host(0), ids.host(0));
    try {
      await this.#o.catalog.insertVolume(row);
    } catch (err) {
      await rm(root, { recursive: true, force: true });
      if (err instanceof WarrenError && err.reason === "already_exists") throw nameTaken(name);
      throw err;
    }
    return row;
  }

  /** A team's volumes (every team's for the admin: `teamId` undefined). */
  list(teamId: string | undefined): Promise<VolumeRow[]> {
    return this.#o.catalog.listVolumes(teamId);
  }

  /** The volume, if the team may see it (undefined `teamId`: the admin, any team's). */
  async get(teamId: string | undefined, id: string): Promise<VolumeRow> {
    const row = VOLUME_ID.test(id) ? await this.#o.catalog.getVolume(id) : undefined;
    if (!row || (teamId !== undefined && row.teamId !== teamId)) {
      throw new WarrenError("volume_not_found", `volume ${shown(id)} not found`);
    }
    return row;
  }

  /** The team's volume of that name (a create's volumeMounts name volumes). */
  async byName(teamId: string, name: string): Promise<VolumeRow> {
    const row = (await this.#o.catalog.listVolumes(teamId)).find((v) => v.name === name);
    if (!row) throw new WarrenError("volume_not_found", `volume ${shown(name)} not found`);
    return row;
  }

  /**
   * Forgets the volume and removes its files; volume_not_found when there is none,
   * `conflict` while a sandbox mounts it (its guest would lose the files under its feet).
   */
  async destroy(teamId: string | undefined, id: string): Promise<void> {
    const row = await this.get(teamId, id);
    const users = (await this.#o.mountedBy?.(row.id)) ?? [];
    if (users.length > 0) {
      throw new WarrenError(
        "conflict",
        `volume '${row.name}' is mounted by sandbox${users.length > 1 ? "es" : ""} ${users.join(", ")}: kill ${users.length > 1 ? "them" : "it"} first`,
      );
    }
    await this.#o.catalog.deleteVolume(row.id);
    // By descriptor, never following a link a guest left: the tree is the guests' work.
    await new VolumeFiles(this.#o.dir).remove(row.id).catch((err: unknown) => {
      if (!(err instanceof WarrenError && err.reason === "not_found")) throw err;
    });
  }

  /** A fresh content API token for the volume (each GET hands one out, as E2B's does). */
  withToken(row: VolumeRow): VolumeWithToken {
    const expiresAt = this.#now() + (this.#o.tokenTtlMs ?? TOKEN_TTL_MS);
    return { row, token: issueVolumeToken(row.id, row.tokenKey, expiresAt) };
  }

  /**
   * A new token key for the team's volume: every token handed out before stops working at
   * once (a leaked one); the answer carries a token under the new key.
   */
  async rotateToken(teamId: string | undefined, id: string): Promise<VolumeWithToken> {
    const row = await this.get(teamId, id);
    const tokenKey = newVolumeKey();
    if (!(await this.#o.catalog.setVolumeTokenKey(row.id, tokenKey))) {
      throw new WarrenError("volume_not_found", `volume ${shown(id)} not found`);
    }
    return this.withToken({ ...row, tokenKey });
  }

  /** The files of the volume this content API token is for. */
  async files(id: string, token: string | undefined): Promise<VolumeFiles> {
    const row = VOLUME_ID.test(id) ? await this.#o.catalog.getVolume(id) : undefined;
    const refusal =
      row && token !== undefined ? tokenRefusal(row.id, row.tokenKey, token, this.#now()) : "none";
    if (!row || refusal !== undefined) {
      throw new WarrenError(
        "volume_token_invalid",
        refusal === "expired"
          ? "this volume token has expired: get a fresh one from GET /volumes/{id}"
          : "this volume's content needs its token: Authorization: Bearer <token> from GET /volumes/{id}",
      );
    }
    // Measured now if stale: the content API's writes are refused on a fresh figure.
    await this.#quota?.check(row.teamId, 0);
    return new VolumeFiles(this.#root(row.id), {
      ...(this.#o.ids && { ids: this.#o.ids }),
      admit: this.#admitter(row.teamId),
      disk: this.#disk,
    });
  }

  /**
   * What a sandbox's NFS server exports (`NfsExport`: the guest services process serves it):
   * these volumes, refused (volume_not_found) when one is gone or is not the sandbox's team's
   * (`teamId`): what the sandbox's row says is not taken on trust.
   */
  async exportFor(volumeIds: readonly string[], teamId: string): Promise<NfsExport> {
    for (const id of volumeIds) {
      const row = VOLUME_ID.test(id) ? await this.#o.catalog.getVolume(id) : undefined;
      // Another team's volume reads as a missing one, as everywhere else.
      if (row?.teamId !== teamId) {
        throw new WarrenError("volume_not_found", `volume ${shown(id)} no longer exists`);
      }
    }
    const limit = await this.#o.limitOf?.(teamId);
    return {
      volumes: volumeIds.map((id) => ({ key: id, root: this.#root(id) })),
      teamId,
      ...(limit !== undefined && {
        quota: { limitBytes: limit, roots: (await this.list(teamId)).map((r) => this.#root(r.id)) },
      }),
      disk: { dir: this.#o.dir, reserveMiB: this.#o.diskReserveMiB ?? DISK_RESERVE_MIB },
    };
  }

  #now(): number {
    return this.#o.now?.() ?? Date.now();
  }

  #root(id: string): string {
    return join(this.#o.dir, id);
  }

  /**
   * Before the volumes are served: their directory made, and with a guest id range, every
   * owner in it moved there once (volumes made before held raw ids).
   */
  async prepare(): Promise<void> {
    await this.#ensureDir();
    if (this.#o.ids) await shiftVolumeOwners(this.#o.dir, this.#o.ids);
  }

  async #ensureDir(): Promise<void> {
    await mkdir(this.#o.dir, { recursive: true, mode: 0o700 });
    await chmod(this.#o.dir, 0o700);
    const ids = this.#o.ids;
    // The range's root reaches the volumes; no other account of the host does.
    if (ids) await chown(this.#o.dir, ids.host(0), ids.host(0));
  }
}

function checkName(name: unknown): void {
  if (typeof name !== "string" || !NAME.test(name) || name.length > MAX_NAME_LENGTH) {
    throw new WarrenError(
      "invalid_argument",
      `body/name must be 1 to ${MAX_NAME_LENGTH} letters, digits, '_' or '-'`,
    );
  }
}

function nameTaken(name: string): WarrenError {
  return new WarrenError("volume_name_taken", `the team already has a volume named '${name}'`);
}

function shown(id: string): string {
  return JSON.stringify(id.length > 64 ? `${id.slice(0, 64)}…` : id);
}
