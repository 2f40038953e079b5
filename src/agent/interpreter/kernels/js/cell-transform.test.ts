import assert from "node:assert/strict";
import { describe, it } from "node:test";
import vm from "node:vm";
import { CellSyntaxError, HELPER_KEY, transformCell } from "./cell-transform.js";

/** A global scope of its own, with a helper whose imports are recorded and faked. */
function notebook(modules: Record<string, Record<string, unknown>> = {}) {
  const imported: { specifier: string; options: unknown }[] = [];
  const context = vm.createContext({ console });
  Object.defineProperty(vm.runInContext("globalThis", context), Symbol.for(HELPER_KEY), {
    value: {
      import: async (specifier: string, options?: unknown) => {
        imported.push({ specifier, options });
        const module = modules[specifier];
        if (!module) throw new Error(`no module ${specifier}`);
        return module;
      },
      meta: { url: "file:///home/user/[cell]" },
    },
  });
  let n = 0;
  const run = (source: string): Promise<unknown> => {
    const cell = transformCell(source);
    n += 1;
    return vm.runInContext(cell.code, context, {
      filename: `<cell ${n}>`,
      columnOffset: -cell.prefixLength,
    }) as Promise<unknown>;
  };
  /** A global's value; objects copied out of the context's realm (for deepEqual). */
  const global = (name: string): unknown => {
    const value: unknown = vm.runInContext(name, context);
    return typeof value === "object" && value !== null ? JSON.parse(JSON.stringify(value)) : value;
  };
  return { run, imported, global };
}

describe("transformCell", () => {
  it("returns the last expression's value, awaiting a promise", async () => {
    const { run } = notebook();
    assert.equal(await run("1 + 2"), 3);
    assert.equal(await run("x = 5"), 5);
    assert.equal(await run("await Promise.resolve('Hello World!')"), "Hello World!");
    assert.equal(await run("const y = 1"), undefined);
    assert.equal(await run("if (true) { 1 }"), undefined);
    assert.equal(await run("// only a comment"), undefined);
    assert.deepEqual(JSON.parse(JSON.stringify(await run("{ a: 1, b: [2] }"))), { a: 1, b: [2] });
    assert.equal(await run("{ let inBlock = 1; inBlock }"), undefined, "a real block stays one");
  });

  it("keeps top-level bindings across cells and lets later cells declare them again", async () => {
    const { run, global } = notebook();
    await run("const z = 1; let w; var v = 3; class C { k = 1 }");
    assert.equal(await run("z"), 1);
    assert.equal(await run("const z = 2; z"), 2);
    assert.equal(await run("let w = 'again'; w"), "again");
    assert.equal(await run("var v; v"), 3, "a var without initialiser keeps its value");
    assert.equal(await run("class C { k = 2 }; new C().k"), 2);
    assert.equal(global("typeof C"), "function");
  });

  it("makes destructured and loop variables global, not function-local ones", async () => {
    const { run, global } = notebook();
    await run("const { a, b: [c, ...d], ...rest } = { a: 1, b: [2, 3, 4], e: 5 }");
    assert.deepEqual(
      [global("a"), global("c"), global("d"), global("rest")],
      [1, 2, [3, 4], { e: 5 }],
    );
    await run(
      "for (var i = 0; i < 3; i++) { var last = i }\nfor (var k of [7]) {}\nfunction f() { var inner = 1 }",
    );
    assert.deepEqual([global("i"), global("last"), global("k")], [3, 2, 7]);
    assert.equal(global("typeof inner"), "undefined");
  });

  it("keeps an if's single-statement body conditional", async () => {
    const { run, global } = notebook();
    await run("if (false) var q = 2");
    assert.equal(global("q"), undefined);
    await run("if (true) var q = 3");
    assert.equal(global("q"), 3);
  });

  it("does not join a declaration to the line before it", async () => {
    const { run, global } = notebook();
    await run("const o = { a: 4 }; let x = 1\nx\nconst { a } = o");
    assert.equal(global("a"), 4);
  });

  it("hoists and publishes top-level functions", async () => {
    const { run, global } = notebook();
    assert.equal(await run("add(1, 2)\nfunction add(a, b) { return a + b }"), undefined);
    assert.equal(await run("add(1, 2)"), 3);
    assert.equal(global("typeof add"), "function");
  });

  it("strips TypeScript, also in plain JavaScript cells", async () => {
    const { run } = notebook();
    assert.equal(await run('const x: string = "Hello World!"; x'), "Hello World!");
    assert.equal(await run("interface P { a: number }\nenum Color { Red, Green }\nColor.Green"), 1);
    assert.equal(await run("function id<T>(v: T): T { return v }\nid<number>(4)"), 4);
    assert.equal(
      await run(
        "class K { constructor(private n: number) {} get(): number { return this.n } }\nnew K(6).get()",
      ),
      6,
    );
  });

  it("turns import declarations into awaited helper imports", async () => {
    const { run, imported, global } = notebook({
      fs: { readFileSync: () => "read", default: { fs: true } },
      m: { default: "dflt", a: 1, "c-d": 2 },
    });
    await run("import { readFileSync } from 'fs'");
    assert.equal(await run("typeof readFileSync"), "function");
    await run("import d, * as ns from 'm'\nimport { a as b, 'c-d' as e } from 'm'\nimport 'm'");
    assert.deepEqual([global("d"), global("b"), global("e")], ["dflt", 1, 2]);
    assert.equal((global("ns") as { a: number }).a, 1);
    await run("import j from 'm' with { type: 'json' }");
    assert.deepEqual(JSON.parse(JSON.stringify(imported.at(-1))), {
      specifier: "m",
      options: { with: { type: "json" } },
    });
    assert.equal(await run("(await import('fs')).readFileSync()"), "read");
    assert.equal(await run("import.meta.url"), "file:///home/user/[cell]");
  });

  it("drops exports but keeps what they declare", async () => {
    const { run, global } = notebook();
    await run(
      "export const e1 = 1\nexport function e2() { return 2 }\nexport default class E3 {}\nexport { e1 as e4 }",
    );
    assert.deepEqual(
      [global("e1"), global("typeof e2"), global("typeof E3")],
      [1, "function", "function"],
    );
  });

  it("keeps the user's line numbers in stack traces", async () => {
    const { run } = notebook({ m: { a: 1 } });
    const source = "import {\n  a,\n} from 'm'\nconst x = 1\nnull.boom";
    const err = (await run(source).catch((e: unknown) => e)) as Error;
    assert.match(err.stack ?? "", /<cell 1>:5:/);
  });

  it("reports a syntax error with the line and a caret", () => {
    assert.throws(
      () => transformCell("const ok = 1\nconst x = ;"),
      (err: unknown) =>
        err instanceof CellSyntaxError &&
        err.name === "SyntaxError" &&
        /\(2:10\)/.test(err.message) &&
        err.excerpt === "const x = ;\n          ^",
    );
  });

  it("lists the names a cell makes global", () => {
    const cell = transformCell(
      "import x from 'm'\nconst [a] = [1]\nclass K {}\nfunction f() {}\nvar v",
    );
    assert.deepEqual([...cell.globals].sort(), ["K", "a", "f", "v", "x"]);
  });
});
