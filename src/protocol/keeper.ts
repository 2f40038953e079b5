/**
 * The keeper's wire (src/keeper): one JSON object per line over a unix socket, in each
 * direction. The server sends requests (`KeeperRequest`, each with an id); the keeper answers
 * each by its id (`KeeperAnswer`) and sends events (`KeeperEvent`) when something happens on
 * its own (a VMM exited). Everything the keeper reads is bounded by the limits below; a line
 * longer than `KEEPER_MAX_LINE_BYTES` ends the connection.
 */

/** Bumped when a message changes meaning: a server and a keeper of other versions part. */
export const KEEPER_PROTOCOL_VERSION = 1;

/** The socket's name in the keeper's directory (`<data>/keeper`, root's, 0700). */
export const KEEPER_SOCKET_NAME = "keeper.sock";

/** Longest line either side accepts, newline excluded. */
export const KEEPER_MAX_LINE_BYTES = 1024 * 1024;
/** Longest note (a VM's record, opaque to the keeper), in UTF-16 code units. */
export const KEEPER_MAX_NOTE_LENGTH = 256 * 1024;
/** Most arguments of one QEMU, and the longest one. */
export const KEEPER_MAX_ARGS = 512;
export const KEEPER_MAX_ARG_LENGTH = 8192;
/** Most `cgroup.procs` files one QEMU joins (one per cgroup v1 hierarchy). */
export const KEEPER_MAX_CGROUP_FILES = 8;
/** Most VMMs one keeper holds. */
export const KEEPER_MAX_VMS = 4096;
/** Exits the keeper remembers for the next server while none is connected (oldest dropped). */
export const KEEPER_MAX_EXITS = 64;

/** A VM's key: its id (names its runtime directory, cgroup and QMP socket). */
export const KEEPER_KEY = /^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/;

export type KeeperRequest =
  /** Attaches this connection as the server (one at a time); answered with `HelloResult`. */
  | {
      readonly id: number;
      readonly type: "hello";
      readonly version: number;
      readonly serverPid: number;
    }
  /** Starts a QEMU; answered with `SpawnResult`. */
  | {
      readonly id: number;
      readonly type: "spawn";
      readonly key: string;
      readonly args: readonly string[];
      /** `cgroup.procs` files it joins before QEMU runs: under the keeper's VM cgroups only. */
      readonly cgroupProcs: readonly string[];
      /** Its NIC: the tap `name` in namespace `netns`, opened by the keeper and handed over. */
      readonly tap?: { readonly netns: string; readonly name: string };
      /** KSM may merge its memory (PR_SET_MEMORY_MERGE around the spawn). */
      readonly mergeable: boolean;
    }
  /** SIGKILL; its `exited` event follows. */
  | { readonly id: number; readonly type: "kill"; readonly key: string }
  /** Replaces what the keeper keeps for the VM on the server's behalf (its record). */
  | { readonly id: number; readonly type: "note"; readonly key: string; readonly note: string }
  /** The VMMs held now (`HelloResult.vms`). */
  | { readonly id: number; readonly type: "list" };

export type KeeperRequestType = KeeperRequest["type"];

/** One VMM the keeper holds. */
export interface KeeperVm {
  readonly key: string;
  readonly pid: number;
  /**
   * The keeper's descriptor on the VM's network namespace (held while it runs): a server
   * whose mounts of it are gone (its mount namespace was a unit's) mounts
   * `/proc/<keeperPid>/fd/<netnsFd>` again.
   */
  readonly netnsFd?: number;
  /** The server's last note for it (its VM record), if any. */
  readonly note?: string;
}

/** How a VMM ended, with the end of what QEMU wrote on its stderr. */
export interface KeeperExit {
  readonly key: string;
  readonly pid: number;
  readonly code: number | null;
  readonly signal: string | null;
  /** Set when the keeper killed it (a `kill`, or the keeper stopping). */
  readonly killed: boolean;
  readonly stderr: string;
}

export interface HelloResult {
  readonly version: number;
  readonly keeperPid: number;
  readonly vms: readonly KeeperVm[];
  /** VMMs that ended while no server was connected (the last `KEEPER_MAX_EXITS`). */
  readonly exits: readonly KeeperExit[];
}

export interface SpawnResult {
  readonly pid: number;
}

export type KeeperAnswer =
  | { readonly id: number; readonly ok: true; readonly result?: unknown }
  | {
      readonly id: number;
      readonly ok: false;
      readonly error: string;
      /** A hello refused because another server is connected (it may be on its way out). */
      readonly busy?: true;
    };

export type KeeperEvent =
  | ({ readonly type: "exited" } & KeeperExit)
  /** The keeper is stopping (SIGTERM): its VMMs are being killed. */
  | { readonly type: "stopping" };

export type KeeperMessage = KeeperAnswer | KeeperEvent;
