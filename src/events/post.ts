import { request as httpRequest } from "node:http";
import { request as httpsRequest } from "node:https";
import { isIP } from "node:net";
import { article, nonPublicAddress, publicOnlyLookup } from "../shared/public-address.js";

/** One webhook delivery attempt: a POST of `body` to `url`, its answer's status only. */
export interface PostRequest {
  readonly url: string;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
  readonly timeoutMs: number;
  /** Hosts (`host[:port]`) that may be on non-public addresses (the operator's list). */
  readonly privateHosts: readonly string[];
}

export type PostResult = { readonly status: number } | { readonly error: string };

/** What a receiver's answer may hold that is read at all: its head (Node's 16 KiB bound). */
const MAX_ERROR = 512;

/**
 * Sends one delivery and reads the receiver's status line and headers, never its body
 * (discarded as it comes). The receiver is a tenant's choice: a name must resolve to public
 * addresses only, checked by the connection's own lookup, unless the operator listed the
 * host; an address literal likewise. No redirect is followed, no connection pooled, and the
 * whole exchange ends within `timeoutMs`. Never throws: a failure is its `error`. Runs in
 * the guest services process (src/guest-services), not the server.
 */
export function postWebhook(request: PostRequest): Promise<PostResult> {
  return new Promise((resolve) => {
    const done = (result: PostResult) => resolve(result);
    let url: URL;
    try {
      url = new URL(request.url);
    } catch {
      return done({ error: "not a URL" });
    }
    const trusted = request.privateHosts.includes(url.host.toLowerCase());
    const hostname = url.hostname.replace(/^\[|\]$/g, "");
    const literal = isIP(hostname) !== 0;
    const kind = literal && !trusted ? nonPublicAddress(hostname) : undefined;
    if (kind) return done({ error: `${hostname} is ${article(kind)} ${kind} address` });
    const lookup =
      trusted || literal
        ? undefined
        : publicOnlyLookup(
            (name, address, k) =>
              new Error(`${name} resolves to ${address}, ${article(k)} ${k} address`),
          );
    const send = url.protocol === "https:" ? httpsRequest : httpRequest;
    const req = send(url, {
      method: "POST",
      headers: {
        ...request.headers,
        "content-type": "application/json",
        "content-length": String(Buffer.byteLength(request.body)),
      },
      agent: false,
      timeout: request.timeoutMs,
      ...(lookup && { lookup }),
    });
    const timer = setTimeout(() => req.destroy(new Error("timed out")), request.timeoutMs);
    req.once("response", (res) => {
      clearTimeout(timer);
      res.resume();
      res.once("error", () => {});
      done({ status: res.statusCode ?? 0 });
      // The body is not ours to wait for: the connection ends with the answer's head.
      req.destroy();
    });
    req.once("timeout", () => req.destroy(new Error("timed out")));
    req.once("error", (err) => {
      clearTimeout(timer);
      done({ error: err.message.slice(0, MAX_ERROR) });
    });
    req.end(request.body);
  });
}
