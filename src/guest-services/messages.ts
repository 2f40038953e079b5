import type { NfsExport } from "../volumes/index.js";

/**
 * What the server and the guest services process say to each other over the child's IPC
 * channel. Each service is keyed by the slot it serves (its network namespace's name). Its
 * listening socket comes with the open (a `net.Server` handle: the process accepts on it
 * from then on); a connection the server accepted before handing it over comes as a socket
 * handle. The server is trusted here; the messages are still checked (`isServicesRequest`).
 */
export type ServicesRequest =
  /**
   * Starts serving a slot's volumes (a sandbox's NFS) on the listener that comes with it;
   * answered `nfs.opened` or `failed`.
   */
  | { readonly type: "nfs.open"; readonly slot: string; readonly spec: NfsExport }
  | { readonly type: "nfs.close"; readonly slot: string }
  /** A guest's connection to that slot's NFS, accepted by the server unread (the handle). */
  | { readonly type: "nfs.connection"; readonly slot: string };

export type ServicesEvent =
  | { readonly type: "ready" }
  | { readonly type: "nfs.opened"; readonly slot: string }
  | { readonly type: "failed"; readonly slot: string; readonly message: string };

const SLOT = /^[A-Za-z0-9._-]{1,64}$/;

/** Whether a message is a well-formed request (the rest is dropped). */
export function isServicesRequest(message: unknown): message is ServicesRequest {
  const m = message as Partial<Record<string, unknown>> | null;
  if (typeof m !== "object" || m === null || typeof m.slot !== "string" || !SLOT.test(m.slot)) {
    return false;
  }
  if (m.type === "nfs.close" || m.type === "nfs.connection") return true;
  return m.type === "nfs.open" && typeof m.spec === "object" && m.spec !== null;
}

/** Whether a message is an event the server knows. */
export function isServicesEvent(message: unknown): message is ServicesEvent {
  const m = message as Partial<Record<string, unknown>> | null;
  if (typeof m !== "object" || m === null) return false;
  if (m.type === "ready") return true;
  return (m.type === "nfs.opened" || m.type === "failed") && typeof m.slot === "string";
}
