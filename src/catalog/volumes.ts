/**
 * Volumes: named, persistent directories a team's sandboxes mount and the content API
 * reaches (src/volumes owns the files; this only remembers which exist and whose they are).
 */

export interface VolumeRow {
  readonly id: string;
  readonly teamId: string;
  /** Unique within the team (`^[a-zA-Z0-9_-]+$`). */
  readonly name: string;
  /**
   * Authorises the content API for this volume alone (E2B's volume token). Returned by
   * every GET of the volume, so kept as is, like sandboxes' envd tokens.
   */
  readonly token: string;
  readonly createdAt: string;
}

export interface VolumeCatalog {
  /** already_exists when the team has a volume of that name. */
  insertVolume(row: VolumeRow): Promise<void>;
  getVolume(id: string): Promise<VolumeRow | undefined>;
  /** A team's volumes (every team's when absent), oldest first. */
  listVolumes(teamId?: string): Promise<VolumeRow[]>;
  /** False when there was none. */
  deleteVolume(id: string): Promise<boolean>;
}
