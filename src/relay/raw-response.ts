import { STATUS_CODES } from "node:http";

/**
 * `HTTP/1.1 <status> <reason>` and the flat name/value list, up to the empty line: a
 * response head written on a raw socket (an upgrade's answer, or a refusal of one).
 */
export function rawResponseHead(
  status: number,
  statusMessage: string | undefined,
  rawHeaders: readonly string[],
): string {
  const reason = statusMessage || STATUS_CODES[status] || "";
  let head = `HTTP/1.1 ${status} ${reason}\r\n`;
  for (let i = 0; i + 1 < rawHeaders.length; i += 2)
    head += `${rawHeaders[i]}: ${rawHeaders[i + 1]}\r\n`;
  return `${head}\r\n`;
}
