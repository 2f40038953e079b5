import { VmmError } from "../errors.js";

/** One VMM's own identity: a uid and gid no other process on the host uses. */
export interface VmmIdentity {
  readonly uid: number;
  readonly gid: number;
}

/**
 * Hands each running VMM a uid (and equal gid) of its own from a range, as Firecracker's
 * jailer does: a QEMU that is taken over by its guest then owns only its runtime directory,
 * and cannot signal, trace or read another VMM's files or memory. The range must be unused on
 * the host (no account, no file owners); ids need no /etc/passwd entry.
 */
export class VmmIdentities {
  readonly #inUse = new Set<number>();
  #next = 0;

  constructor(
    readonly base: number,
    readonly count: number,
  ) {
    if (!Number.isInteger(base) || base < 1000 || base + count > 0xfffffffe)
      throw new VmmError(`VMM uid range ${base}+${count} is not a valid range of unprivileged ids`);
  }

  /** A free identity; ids are handed out round-robin, so a just-freed one is reused last. */
  take(): VmmIdentity {
    for (let tried = 0; tried < this.count; tried++) {
      const uid = this.base + ((this.#next + tried) % this.count);
      if (this.#inUse.has(uid)) continue;
      this.#inUse.add(uid);
      this.#next = (uid - this.base + 1) % this.count;
      return { uid, gid: uid };
    }
    throw new VmmError(`all ${this.count} VMM uids from ${this.base} are in use`);
  }

  /**
   * Takes exactly `uid`: a VMM that kept running while the server that took it for it did
   * not (reattach). Refused when it is outside the range or already in use here.
   */
  claim(uid: number): VmmIdentity {
    if (!Number.isInteger(uid) || uid < this.base || uid >= this.base + this.count)
      throw new VmmError(`VMM uid ${uid} is not in the range ${this.base}+${this.count}`);
    if (this.#inUse.has(uid)) throw new VmmError(`VMM uid ${uid} is already in use`);
    this.#inUse.add(uid);
    return { uid, gid: uid };
  }

  give(identity: VmmIdentity): void {
    this.#inUse.delete(identity.uid);
  }

  get inUse(): number {
    return this.#inUse.size;
  }
}
