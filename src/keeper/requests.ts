// What the keeper accepts from the server's socket: each request checked field by field
// against the protocol's bounds before anything acts on it. A request that fails is answered
// with an error naming the field (when it carried an id) and changes nothing.
import { isAbsolute, normalize } from "node:path";
import {
  KEEPER_KEY,
  KEEPER_MAX_ARG_LENGTH,
  KEEPER_MAX_ARGS,
  KEEPER_MAX_CGROUP_FILES,
  KEEPER_MAX_NOTE_LENGTH,
  type KeeperRequest,
} from "../protocol/keeper.js";

/** A namespace as `ip netns` names it, a network interface as Linux does (15 bytes). */
const NETNS_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const TAP_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,14}$/;
const MAX_ID = 2 ** 31;

export class BadRequest extends Error {}

type Json = Record<string, unknown>;

/** The request id of a value, when it has a usable one (to answer a bad request by). */
export function requestId(value: unknown): number | undefined {
  const id = (value as Json | null)?.id;
  return Number.isSafeInteger(id) && (id as number) >= 0 && (id as number) < MAX_ID
    ? (id as number)
    : undefined;
}

/**
 * Checks one request; throws BadRequest naming what is wrong. `cgroupParents`: the only
 * directories whose VM groups a QEMU may join (`<parent>/<key>/cgroup.procs`).
 */
export function parseRequest(value: unknown, cgroupParents: readonly string[]): KeeperRequest {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw new BadRequest("a request is a JSON object");
  const r = value as Json;
  const id = requestId(r);
  if (id === undefined) throw new BadRequest("id is not an integer from 0");
  switch (r.type) {
    case "hello":
      return {
        id,
        type: "hello",
        version: integer(r.version, "version"),
        serverPid: integer(r.serverPid, "serverPid"),
      };
    case "spawn": {
      const key = keyOf(r.key);
      return {
        id,
        type: "spawn",
        key,
        args: strings(r.args, "args", KEEPER_MAX_ARGS, KEEPER_MAX_ARG_LENGTH),
        cgroupProcs: cgroupFiles(r.cgroupProcs, key, cgroupParents),
        ...(r.tap !== undefined && { tap: tapOf(r.tap) }),
        mergeable: flag(r.mergeable, "mergeable"),
      };
    }
    case "kill":
      return { id, type: "kill", key: keyOf(r.key) };
    case "note": {
      if (typeof r.note !== "string" || r.note.length > KEEPER_MAX_NOTE_LENGTH)
        throw new BadRequest(`note is not a string of at most ${KEEPER_MAX_NOTE_LENGTH}`);
      return { id, type: "note", key: keyOf(r.key), note: r.note };
    }
    case "list":
      return { id, type: "list" };
    default:
      throw new BadRequest(`unknown request type ${JSON.stringify(String(r.type).slice(0, 40))}`);
  }
}

function keyOf(value: unknown): string {
  if (typeof value !== "string" || !KEEPER_KEY.test(value))
    throw new BadRequest("key is not a VM id");
  return value;
}

function integer(value: unknown, name: string): number {
  if (!Number.isSafeInteger(value) || (value as number) < 0 || (value as number) >= MAX_ID)
    throw new BadRequest(`${name} is not an integer from 0`);
  return value as number;
}

function flag(value: unknown, name: string): boolean {
  if (typeof value !== "boolean") throw new BadRequest(`${name} is not a boolean`);
  return value;
}

function strings(value: unknown, name: string, max: number, maxLength: number): string[] {
  if (!Array.isArray(value) || value.length > max)
    throw new BadRequest(`${name} is not a list of at most ${max}`);
  for (const item of value) {
    if (typeof item !== "string" || item.length > maxLength || item.includes("\0"))
      throw new BadRequest(`${name} holds an item that is no string of at most ${maxLength}`);
  }
  return value as string[];
}

/** Each a VM group's `cgroup.procs` under one of `parents`, named by the VM's key. */
function cgroupFiles(value: unknown, key: string, parents: readonly string[]): string[] {
  const files = strings(value, "cgroupProcs", KEEPER_MAX_CGROUP_FILES, 4096);
  for (const file of files) {
    const inParent = parents.some((parent) => file === `${parent}/${key}/cgroup.procs`);
    if (!isAbsolute(file) || normalize(file) !== file || !inParent)
      throw new BadRequest(`cgroupProcs ${JSON.stringify(file)} is not this VM's group`);
  }
  return files;
}

function tapOf(value: unknown): { netns: string; name: string } {
  const tap = value as Json | null;
  if (typeof tap !== "object" || tap === null) throw new BadRequest("tap is not an object");
  if (typeof tap.netns !== "string" || !NETNS_NAME.test(tap.netns))
    throw new BadRequest("tap.netns is not a namespace name");
  if (typeof tap.name !== "string" || !TAP_NAME.test(tap.name))
    throw new BadRequest("tap.name is not an interface name");
  return { netns: tap.netns, name: tap.name };
}
