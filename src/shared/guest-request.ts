import { type Agent, type IncomingMessage, type OutgoingHttpHeaders, request } from "node:http";
import { Readable } from "node:stream";
import { WarrenError } from "./errors.js";

/**
 * Largest response head (status line and headers) taken from a server in a guest. envd's are
 * a few hundred bytes; Node's own default (16 KiB) is the same bound, named here so that no
 * caller depends on a process-wide flag (`--max-http-header-size`) a deployment may raise.
 */
export const GUEST_HEAD_MAX_BYTES = 16 * 1024;

/**
 * One exchange with a server inside a guest. The guest's root user can replace envd with
 * anything, so every bound is explicit: the head's size, the body's size, and the whole
 * exchange's time (connect, request, head and body: a reply trickled one byte a second never
 * looks idle, so an idle timeout alone bounds nothing).
 */
export interface GuestRequest {
  readonly host: string;
  readonly port: number;
  readonly method: string;
  /** Origin-form path and query. */
  readonly path: string;
  readonly headers?: OutgoingHttpHeaders;
  /**
   * A stream is sent as it is read (chunked) and ends with the exchange: destroyed when it
   * fails; its own error fails the exchange.
   */
  readonly body?: string | Uint8Array | Readable;
  /**
   * Default `false`: a connection of its own. A slot's address is reused by the next
   * sandbox, so a pooled connection may only be one owned by a single VM (an EnvdClient's).
   */
  readonly agent?: Agent | false;
  /** The whole exchange, from connecting to the body's last byte. */
  readonly timeoutMs: number;
  /** Largest body taken; past it the exchange is cut (guest_reply_invalid). */
  readonly maxBodyBytes: number;
  /** Largest head taken. Default GUEST_HEAD_MAX_BYTES. */
  readonly maxHeadBytes?: number;
  /** Aborts the exchange at once (a kill of the sandbox); rejects with the signal's reason. */
  readonly signal?: AbortSignal;
  /** What the exchange is called in errors. Default `<method> <path>`. */
  readonly label?: string;
}

export interface GuestReply {
  readonly status: number;
  readonly headers: IncomingMessage["headers"];
  readonly body: Buffer;
}

/**
 * Runs one bounded exchange. Rejects with `guest_unavailable` when the whole exchange does
 * not end within `timeoutMs`, `guest_reply_invalid` when the head or the body is larger than
 * allowed (neither is retried: a guest sending them is not going to stop), the signal's
 * reason when it aborts, and Node's own error when the connection fails (refused, reset).
 * Nothing of the guest's is kept past the call: the socket is destroyed on every failure.
 */
export function guestRequest(options: GuestRequest): Promise<GuestReply> {
  const label = options.label ?? `${options.method} ${options.path.split("?")[0]}`;
  const maxHeadBytes = options.maxHeadBytes ?? GUEST_HEAD_MAX_BYTES;
  return new Promise((resolve, reject) => {
    const { signal, body } = options;
    const stream = body instanceof Readable ? body : undefined;
    if (signal?.aborted) {
      stream?.destroy();
      reject(signal.reason);
      return;
    }
    let settled = false;
    const finish = (outcome: () => void) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      outcome();
    };
    const fail = (err: unknown) =>
      finish(() => {
        req.destroy();
        stream?.destroy();
        reject(err);
      });
    const onAbort = () => fail(signal?.reason);
    const timer = setTimeout(
      () =>
        fail(
          new WarrenError(
            "guest_unavailable",
            `${label}: no complete answer from ${options.host}:${options.port} within ${options.timeoutMs} ms`,
          ),
        ),
      options.timeoutMs,
    );
    const tooLarge = (what: string, limit: number) =>
      new WarrenError(
        "guest_reply_invalid",
        `${label}: the reply from ${options.host}:${options.port} has a ${what} over ${limit} bytes`,
      );

    const req = request(
      {
        host: options.host,
        port: options.port,
        method: options.method,
        path: options.path,
        agent: options.agent ?? false,
        maxHeaderSize: maxHeadBytes,
        headers: {
          ...options.headers,
          ...(body !== undefined &&
            !stream && {
              "content-length": String(Buffer.byteLength(body as string | Uint8Array)),
            }),
        },
      },
      (res) => {
        const declared = Number(res.headers["content-length"]);
        if (Number.isFinite(declared) && declared > options.maxBodyBytes) {
          fail(tooLarge("body", options.maxBodyBytes));
          return;
        }
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > options.maxBodyBytes) fail(tooLarge("body", options.maxBodyBytes));
          else chunks.push(chunk);
        });
        res.on("end", () =>
          finish(() => {
            // Answered before taking the whole body (a guest may): nothing more is sent.
            if (stream && !stream.readableEnded) stream.destroy();
            resolve({
              status: res.statusCode ?? 0,
              headers: res.headers,
              body: Buffer.concat(chunks),
            });
          }),
        );
        res.on("error", fail);
        // Closed before its end: the guest cut its own reply.
        res.on("close", () => {
          if (!res.complete) fail(new Error(`${label}: the reply was cut before its end`));
        });
      },
    );
    req.on("error", (err: NodeJS.ErrnoException) => {
      fail(err.code === "HPE_HEADER_OVERFLOW" ? tooLarge("head", maxHeadBytes) : err);
    });
    signal?.addEventListener("abort", onAbort, { once: true });
    if (stream) {
      stream.on("error", fail);
      stream.pipe(req);
    } else req.end(body);
  });
}
