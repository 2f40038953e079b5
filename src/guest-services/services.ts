import type { Server, Socket } from "node:net";
import type { Logger } from "../shared/index.js";
import { type NfsService, serveNfsExport } from "../volumes/index.js";
import type { ServicesEvent, ServicesRequest } from "./messages.js";

/** A slot's NFS: its service and the listener it accepts on (in the slot's namespace). */
interface SlotNfs {
  readonly service: Promise<NfsService>;
  readonly listener: Server | undefined;
}

/**
 * The guest-facing services of one node, in their own process: each slot's NFS (its
 * sandbox's volumes), on the listener the server made in the slot's namespace and handed
 * over. What a guest sends is parsed here and nowhere else; a connection the server accepted
 * before the handover comes in as a socket it never read.
 */
export class GuestServiceTable {
  readonly #nfs = new Map<string, SlotNfs>();

  constructor(
    private readonly send: (event: ServicesEvent) => void,
    private readonly logger: Logger,
    private readonly options: { readonly stallMs?: number } = {},
  ) {}

  handle(request: ServicesRequest, handle: Server | Socket | undefined): void {
    if (request.type === "nfs.open") this.#openNfs(request, isServer(handle) ? handle : undefined);
    else if (request.type === "nfs.close") this.#closeNfs(request.slot);
    else this.#connect(request.slot, isServer(handle) ? undefined : handle);
  }

  /** Services open now (tests, logs). */
  get size(): number {
    return this.#nfs.size;
  }

  #openNfs(request: Extract<ServicesRequest, { type: "nfs.open" }>, listener?: Server): void {
    const { slot } = request;
    this.#closeNfs(slot); // an open again (the server came back) replaces the old one
    const service = serveNfsExport(request.spec, this.options);
    const entry = { service, listener };
    this.#nfs.set(slot, entry);
    // Accepting from now on (this process's: the server closed its own copy of the socket).
    listener?.on("error", (err) => this.logger.warn({ slot, err }, "guest_services.accept_failed"));
    listener?.on("connection", (socket: Socket) => this.#connect(slot, socket));
    service.then(
      () => this.send({ type: "nfs.opened", slot }),
      (err: unknown) => {
        if (this.#nfs.get(slot) === entry) this.#closeNfs(slot);
        const message = err instanceof Error ? err.message : String(err);
        this.logger.warn({ slot, err: message }, "guest_services.nfs_failed");
        this.send({ type: "failed", slot, message });
      },
    );
  }

  #closeNfs(slot: string): void {
    const entry = this.#nfs.get(slot);
    if (!entry) return;
    this.#nfs.delete(slot);
    entry.listener?.close();
    void entry.service.then(
      (s) => s.close(),
      () => {},
    );
  }

  #connect(slot: string, socket: Socket | undefined): void {
    if (!socket) return;
    socket.on("error", () => {});
    const entry = this.#nfs.get(slot);
    if (!entry) return void socket.destroy();
    entry.service.then(
      (s) => s.accept(socket),
      () => socket.destroy(),
    );
  }
}

function isServer(handle: Server | Socket | undefined): handle is Server {
  return handle !== undefined && "listen" in handle && !("write" in handle);
}
