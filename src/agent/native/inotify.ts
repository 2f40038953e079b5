import { loadAddon } from "../../shared/load-addon.js";

export interface RawInotifyEvent {
  readonly wd: number;
  readonly mask: number;
  readonly cookie: number;
  readonly name: string;
}

declare const handleBrand: unique symbol;
export type InotifyHandle = { readonly [handleBrand]: true };

interface InotifyAddon {
  create(onReadable: () => void): InotifyHandle;
  read(handle: InotifyHandle): RawInotifyEvent[];
  addWatch(handle: InotifyHandle, path: string, mask: number): number;
  rmWatch(handle: InotifyHandle, wd: number): void;
  close(handle: InotifyHandle): void;
}

let addon: InotifyAddon | undefined;

export function inotify(): InotifyAddon {
  addon ??= loadAddon<InotifyAddon>("inotify", import.meta.url);
  return addon;
}

/** Event bits from <sys/inotify.h>. */
export const IN = {
  MODIFY: 0x2,
  ATTRIB: 0x4,
  MOVED_FROM: 0x40,
  MOVED_TO: 0x80,
  CREATE: 0x100,
  DELETE: 0x200,
  DELETE_SELF: 0x400,
  MOVE_SELF: 0x800,
  Q_OVERFLOW: 0x4000,
  IGNORED: 0x8000,
  ONLYDIR: 0x1000000,
  ISDIR: 0x40000000,
} as const;
