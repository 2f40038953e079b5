/**
 * What a server did for its guest, counted: the tests bound the work a guest can make it do
 * by these, not by wall time.
 */
export interface NfsWork {
  /** Directories read (readdir) to answer READDIR/READDIRPLUS. */
  directoryReads: number;
  /** Entries stat'ed to answer READDIR/READDIRPLUS. */
  entriesStatted: number;
  /** Walks of a volume's tree in search of inodes not known. */
  treeWalks: number;
  /** Entries those walks visited. */
  entriesWalked: number;
}

export function newWork(): NfsWork {
  return { directoryReads: 0, entriesStatted: 0, treeWalks: 0, entriesWalked: 0 };
}
