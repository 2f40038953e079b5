/**
 * The origin-form path and query to send upstream: `req.url` as received, or the path of an
 * absolute-form target (`GET http://host/path`), which never chooses where the request goes.
 * Undefined for anything else (`*`, garbage).
 */
export function requestPath(url: string | undefined): string | undefined {
  if (url === undefined || url === "") return undefined;
  if (url.startsWith("/")) return url;
  try {
    const parsed = new URL(url);
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return undefined;
    return `${parsed.pathname}${parsed.search}`;
  } catch {
    return undefined;
  }
}
