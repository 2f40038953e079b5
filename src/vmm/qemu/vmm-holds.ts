import { rm } from "node:fs/promises";
import { VmmError } from "../errors.js";
import type { VmCgroup, VmCgroups } from "./cgroups.js";
import type { VmRecord } from "./vm-record.js";
import type { VmmIdentities, VmmIdentity } from "./vmm-ids.js";
import type { VmmProcess } from "./vmm-process.js";

/** What a driver lends one VMM: taken back once, when the process has exited. */
export interface VmmHold {
  readonly identity: VmmIdentity | undefined;
  readonly cgroup: VmCgroup | undefined;
  readonly qmpSocket: string;
  released: boolean;
  /** A QemuVm of this driver's drives it (not detached): a reattach here is refused. */
  attached: boolean;
}

/**
 * A driver's running VMMs by pid, with what each holds: its uid, cgroup and QMP socket,
 * taken back when its process exits. A VM detached from its object stays here until then
 * (its QEMU still runs as that uid), so the same driver can reattach it without claiming
 * anything twice; another driver (the next server) claims them anew.
 */
export class VmmHolds {
  readonly #byPid = new Map<number, VmmHold>();
  /** Releases under way (a cgroup waits for its exiting VMM to leave it). */
  readonly #releasing = new Set<Promise<void>>();

  constructor(
    readonly identities: VmmIdentities | undefined,
    readonly cgroups: VmCgroups | undefined,
  ) {}

  /** Keeps `hold` for `proc` from now until it exits. */
  keep(proc: VmmProcess, hold: VmmHold): void {
    if (hold.released) return;
    this.#byPid.set(proc.pid, hold);
    void proc.exited.then(() => {
      const releasing = this.release(hold);
      this.#releasing.add(releasing);
      void releasing.finally(() => this.#releasing.delete(releasing));
    });
  }

  /** The VMMs held now (running, attached or detached), by pid. */
  pids(): ReadonlySet<number> {
    return new Set(this.#byPid.keys());
  }

  /** Once every release under way is done (what exited VMMs held is given back). */
  async settled(): Promise<void> {
    while (this.#releasing.size > 0) await Promise.all([...this.#releasing]);
  }

  /** What this driver holds for a VMM it started or claimed, while it runs. */
  of(pid: number): VmmHold | undefined {
    return this.#byPid.get(pid);
  }

  /** Takes back what a VMM held: its uid, cgroup and QMP socket. Once. */
  async release(hold: VmmHold): Promise<void> {
    if (hold.released) return;
    hold.released = true;
    for (const [pid, held] of this.#byPid) if (held === hold) this.#byPid.delete(pid);
    this.giveBack(hold.identity);
    await hold.cgroup?.remove().catch(() => {});
    await rm(hold.qmpSocket, { force: true }).catch(() => {});
  }

  giveBack(identity: VmmIdentity | undefined): void {
    if (identity) this.identities?.give(identity);
  }

  /**
   * Takes the uid of a VMM another driver started (refused if in use here or outside the
   * range) and finds its cgroup, which must exist and hold `pid`.
   */
  async claim(record: VmRecord, pid: number, qmpSocket: string): Promise<VmmHold> {
    const { identities, cgroups } = this;
    if (identities && (record.identity === undefined || record.cgroup !== (cgroups !== undefined)))
      throw new VmmError("it runs outside the jail this driver keeps VMs in", record.spec.id);
    const identity = record.identity && identities?.claim(record.identity.uid);
    try {
      const cgroup = record.cgroup ? await cgroups?.existing(record.spec.id, pid) : undefined;
      const held = identity ?? record.identity;
      return { identity: held, cgroup, qmpSocket, released: false, attached: false };
    } catch (err) {
      this.giveBack(identity);
      throw err;
    }
  }
}
