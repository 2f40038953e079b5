import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { inlineDisposition } from "./content-disposition.js";

describe("inlineDisposition (Go's mime.FormatMediaType)", () => {
  const cases: Array<[string, string]> = [
    ["test.txt", "inline; filename=test.txt"],
    [".env", "inline; filename=.env"],
    ["my document.pdf", 'inline; filename="my document.pdf"'],
    ['file"name.txt', 'inline; filename="file\\"name.txt"'],
    ["file\\name.txt", 'inline; filename="file\\\\name.txt"'],
    ["文档.pdf", "inline; filename*=utf-8''%E6%96%87%E6%A1%A3.pdf"],
  ];
  for (const [name, expected] of cases)
    it(`encodes ${name}`, () => assert.equal(inlineDisposition(name), expected));
});
