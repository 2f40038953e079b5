const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/**
 * `inline; filename=...` as Go's mime.FormatMediaType writes it (what envd sends): a bare
 * token when possible, a quoted string for other ASCII, RFC 2231 encoding for the rest.
 */
export function inlineDisposition(filename: string): string {
  if (TOKEN.test(filename)) return `inline; filename=${filename}`;
  if (/^[\x20-\x7e]*$/.test(filename)) {
    return `inline; filename="${filename.replace(/["\\]/g, (c) => `\\${c}`)}"`;
  }
  const encoded = [...Buffer.from(filename, "utf8")]
    .map((byte) => {
      const c = String.fromCharCode(byte);
      return byte < 0x80 && TOKEN.test(c) && c !== "%" && c !== "'" && c !== "*"
        ? c
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
    })
    .join("");
  return `inline; filename*=utf-8''${encoded}`;
}
