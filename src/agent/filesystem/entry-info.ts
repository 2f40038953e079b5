import { lstat, realpath, stat } from "node:fs/promises";
import { basename } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { EntryInfoSchema } from "../../protocol/gen/filesystem/filesystem_pb.js";
import { type EntryInfo, FileType } from "../../protocol/gen/filesystem/filesystem_pb.js";
import { groupNameOf, userNameOf } from "../users.js";
import { permissionString } from "./file-mode.js";
import { readMetadata } from "./metadata.js";

const NS_PER_S = 1_000_000_000n;

export type EntryInit = MessageInitShape<typeof EntryInfoSchema>;

function fileType(st: { isDirectory(): boolean; isFile(): boolean }): FileType {
  if (st.isDirectory()) return FileType.DIRECTORY;
  return FileType.FILE;
}

/**
 * Describes `path` (kept as given, not symlink-resolved). A symlink reports its target's type
 * and the absolute resolved target; a dangling one is FILE_TYPE_SYMLINK.
 */
export async function entryInfo(path: string): Promise<EntryInit> {
  // bigint stats: the modification time to the nanosecond, as Go reports it.
  const st = await lstat(path, { bigint: true });
  let type = fileType(st);
  let mode = Number(st.mode) & 0o777;
  let symlinkTarget: string | undefined;
  if (st.isSymbolicLink()) {
    const target = await stat(path).catch(() => undefined);
    type = target ? fileType(target) : FileType.SYMLINK;
    // A link's own bits are always 0777; envd reports the target's.
    if (target) mode = target.mode & 0o777;
    symlinkTarget = await realpath(path).catch(() => undefined);
  }
  return {
    name: basename(path) || path,
    type,
    path,
    size: st.size,
    mode,
    permissions: permissionString({ mode: Number(st.mode) }),
    owner: userNameOf(Number(st.uid)),
    group: groupNameOf(Number(st.gid)),
    modifiedTime: { seconds: st.mtimeNs / NS_PER_S, nanos: Number(st.mtimeNs % NS_PER_S) },
    symlinkTarget,
    metadata: await readMetadata(path),
  };
}

export type { EntryInfo };
