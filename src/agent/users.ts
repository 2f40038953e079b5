import { readFileSync, statSync } from "node:fs";
import { WarrenError } from "../shared/index.js";

export interface UserAccount {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
  readonly home: string;
  readonly shell: string;
}

interface Tables {
  readonly stamp: string;
  readonly users: Map<string, UserAccount>;
  readonly userNames: Map<number, string>;
  readonly groupNames: Map<number, string>;
}

let cached: Tables | undefined;

function fileStamp(path: string): string {
  try {
    const st = statSync(path);
    return `${st.mtimeMs}:${st.size}`;
  } catch {
    return "missing";
  }
}

function readLines(path: string): string[][] {
  try {
    return readFileSync(path, "utf8")
      .split("\n")
      .filter((line) => line && !line.startsWith("#"))
      .map((line) => line.split(":"));
  } catch {
    return [];
  }
}

/** /etc/passwd and /etc/group, re-read only when either file changed. */
function tables(): Tables {
  const stamp = `${fileStamp("/etc/passwd")}|${fileStamp("/etc/group")}`;
  if (cached?.stamp === stamp) return cached;
  const users = new Map<string, UserAccount>();
  const userNames = new Map<number, string>();
  for (const [name, , uid, gid, , home, shell] of readLines("/etc/passwd")) {
    if (!name || uid === undefined || gid === undefined) continue;
    const account = {
      name,
      uid: Number(uid),
      gid: Number(gid),
      home: home || "/",
      shell: shell || "/bin/sh",
    };
    users.set(name, account);
    if (!userNames.has(account.uid)) userNames.set(account.uid, name);
  }
  const groupNames = new Map<number, string>();
  for (const [name, , gid] of readLines("/etc/group")) {
    if (name && gid !== undefined && !groupNames.has(Number(gid)))
      groupNames.set(Number(gid), name);
  }
  cached = { stamp, users, userNames, groupNames };
  return cached;
}

/** The account for a user name; an unknown name is an authentication failure, as in envd. */
export function lookupUser(name: string): UserAccount {
  const account = tables().users.get(name);
  if (!account) throw new WarrenError("unauthenticated", `invalid username: '${name}'`);
  return account;
}

export function userExists(name: string): boolean {
  return tables().users.has(name);
}

export function userNameOf(uid: number): string {
  return tables().userNames.get(uid) ?? String(uid);
}

export function groupNameOf(gid: number): string {
  return tables().groupNames.get(gid) ?? String(gid);
}
