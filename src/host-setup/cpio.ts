/** One member of an initramfs archive; paths are relative ("bin/busybox"), parents first. */
export type CpioEntry =
  | { readonly type: "dir"; readonly path: string; readonly mode?: number }
  | { readonly type: "file"; readonly path: string; readonly data: Buffer; readonly mode?: number }
  | { readonly type: "symlink"; readonly path: string; readonly target: string }
  | {
      readonly type: "char";
      readonly path: string;
      readonly major: number;
      readonly minor: number;
      readonly mode?: number;
    };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;

function hex8(value: number): string {
  return value.toString(16).padStart(8, "0");
}

function pad4(length: number): Buffer {
  return Buffer.alloc((4 - (length % 4)) % 4);
}

function header(fields: {
  ino: number;
  mode: number;
  nlink: number;
  size: number;
  rdevMajor: number;
  rdevMinor: number;
  nameSize: number;
}): string {
  return [
    "070701",
    hex8(fields.ino),
    hex8(fields.mode),
    hex8(0), // uid
    hex8(0), // gid
    hex8(fields.nlink),
    hex8(0), // mtime: 0 keeps the archive reproducible
    hex8(fields.size),
    hex8(0), // devmajor
    hex8(0), // devminor
    hex8(fields.rdevMajor),
    hex8(fields.rdevMinor),
    hex8(fields.nameSize),
    hex8(0), // check
  ].join("");
}

/**
 * The "newc" cpio format the kernel unpacks as an initramfs (what `cpio -H newc -o` writes),
 * owned by root with mtime 0, so the same entries always give the same bytes.
 */
export function newcArchive(entries: readonly CpioEntry[]): Buffer {
  const parts: Buffer[] = [];
  const add = (
    name: string,
    mode: number,
    data: Buffer,
    ino: number,
    rdev: [number, number] = [0, 0],
  ) => {
    const nameBytes = Buffer.from(`${name}\0`);
    const head = Buffer.from(
      header({
        ino,
        mode,
        nlink: (mode & 0o170000) === S_IFDIR ? 2 : 1,
        size: data.length,
        rdevMajor: rdev[0],
        rdevMinor: rdev[1],
        nameSize: nameBytes.length,
      }),
      "ascii",
    );
    parts.push(head, nameBytes, pad4(head.length + nameBytes.length), data, pad4(data.length));
  };
  let ino = 1;
  for (const entry of entries) {
    const path = entry.path.replace(/^\/+/, "");
    switch (entry.type) {
      case "dir":
        add(path, S_IFDIR | (entry.mode ?? 0o755), Buffer.alloc(0), ino++);
        break;
      case "file":
        add(path, S_IFREG | (entry.mode ?? 0o644), entry.data, ino++);
        break;
      case "symlink":
        add(path, S_IFLNK | 0o777, Buffer.from(entry.target), ino++);
        break;
      case "char":
        add(path, S_IFCHR | (entry.mode ?? 0o600), Buffer.alloc(0), ino++, [
          entry.major,
          entry.minor,
        ]);
        break;
    }
  }
  add("TRAILER!!!", 0, Buffer.alloc(0), 0);
  return Buffer.concat(parts);
}
