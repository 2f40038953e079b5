import type { KernelEvent } from "./kernel.js";

/** MIME types that have a field of their own in E2B's result; the rest go under `extra`. */
const FIELDS: Readonly<Record<string, string>> = {
  "text/plain": "text",
  "text/html": "html",
  "text/markdown": "markdown",
  "image/svg+xml": "svg",
  "image/png": "png",
  "image/jpeg": "jpeg",
  "application/pdf": "pdf",
  "text/latex": "latex",
  "application/json": "json",
  "application/javascript": "javascript",
  "e2b/data": "data",
  "e2b/chart": "chart",
};

/**
 * One line of `/execute`'s answer for a kernel event, as E2B's server writes it
 * (docs/code-interpreter-wire.md §2.3–2.4).
 */
export function executionLine(event: KernelEvent): Record<string, unknown> {
  switch (event.type) {
    case "execution_count":
      return { type: "number_of_executions", execution_count: event.count };
    case "stdout":
    case "stderr":
      return { type: event.type, text: event.text, timestamp: new Date().toISOString() };
    case "error":
      return { type: "error", name: event.name, value: event.value, traceback: event.traceback };
    case "result":
      return resultLine(event.data, event.main);
  }
}

function resultLine(data: Readonly<Record<string, unknown>>, main: boolean) {
  const line: Record<string, unknown> = { type: "result" };
  const extra: Record<string, unknown> = {};
  for (const [mime, value] of Object.entries(data)) {
    const field = FIELDS[mime];
    if (field === undefined) extra[mime] = value;
    else line[field] = field === "text" && typeof value === "string" ? unquoted(value) : value;
  }
  // Always present, as E2B's server sends it; the SDKs' tests expect `{}` for a plain plot.
  line.extra = extra;
  line.is_main_result = main;
  return line;
}

/** A repr's one pair of surrounding quotes goes: `'bar'` reads as `bar` (E2B does the same). */
function unquoted(text: string): string {
  if (text.length >= 2) {
    const first = text[0];
    if ((first === "'" || first === '"') && text.endsWith(first)) return text.slice(1, -1);
  }
  return text;
}
