import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import type { IncomingMessage, ServerResponse } from "node:http";
import { extname, join } from "node:path";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".map": "application/json",
};

/** The page may load its own files only, talk to its own origin only, never be framed. */
const HEADERS = {
  "content-security-policy":
    "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-cache",
};

/**
 * Serves the dashboard's built files (`dist/dashboard`, made by `npm run build`) at
 * `/dashboard/`. The files are public (the page asks for an API key before it reads
 * anything); only plain names directly in `dir` are served, nothing else of the disk.
 */
export function dashboardFiles(dir: string) {
  return {
    matches(req: IncomingMessage): boolean {
      const path = (req.url ?? "").split("?")[0] ?? "";
      return (
        (req.method === "GET" || req.method === "HEAD") &&
        (path === "/dashboard" || path.startsWith("/dashboard/"))
      );
    },
    async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
      const path = (req.url ?? "").split("?")[0] ?? "";
      if (path === "/dashboard") {
        res.writeHead(301, { location: "/dashboard/" });
        res.end();
        return;
      }
      const name = path.slice("/dashboard/".length) || "index.html";
      const type = TYPES[extname(name)];
      const file = join(dir, name);
      const found =
        /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name) && type !== undefined
          ? await stat(file).then(
              (s) => (s.isFile() ? s : undefined),
              () => undefined,
            )
          : undefined;
      if (!found || !type) {
        const body = JSON.stringify({ code: 404, message: `no dashboard file ${name}` });
        res.writeHead(404, { "content-type": "application/json" });
        res.end(body);
        return;
      }
      res.writeHead(200, { ...HEADERS, "content-type": type, "content-length": found.size });
      if (req.method === "HEAD") {
        res.end();
        return;
      }
      createReadStream(file)
        .on("error", () => res.destroy())
        .pipe(res);
    },
  };
}
