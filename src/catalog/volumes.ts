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
   * The key the volume's content API tokens are signed with (src/volumes/volume-tokens.ts):
   * never handed out; a new one ends every token signed before it. Kept in the `token`
   * column of earlier schemas.
   */
  readonly tokenKey: string;
  readonly createdAt: string;
}

export interface VolumeCatalog {
  /** already_exists when the team has a volume of that name. */
  insertVolume(row: VolumeRow): Promise<void>;
  getVolume(id: string): Promise<VolumeRow | undefined>;
  /** A team's volumes (every team's when absent), oldest first. */
  listVolumes(teamId?: string): Promise<VolumeRow[]>;
  /** A new token key for the volume; false when there is none. */
  setVolumeTokenKey(id: string, tokenKey: string): Promise<boolean>;
  /** False when there was none. */
  deleteVolume(id: string): Promise<boolean>;
}
