import { type AnyNode, type Pattern, type Program, parse } from "acorn";
import { fullAncestor } from "acorn-walk";
import { transform as sucrase } from "sucrase";

/**
 * Turns one notebook cell into a script that runs statefully in the kernel's global scope,
 * the way Node's REPL handles top-level await:
 *
 * - TypeScript types are stripped (sucrase), in JavaScript cells too.
 * - A cell that is one `{...}` is an object literal if it parses as one (as in Node's REPL).
 * - The body runs in an async arrow, so `await` works at top level; the value of the last
 *   expression statement is returned (a thenable is awaited, as E2B's kernel does).
 * - Top-level `let`/`const`/`class`/`import` bindings, and `var` outside functions, become
 *   globals: declared with `var` before the arrow and assigned inside it. They outlive the
 *   cell and may be declared again by a later one (`const` loses its read-only check).
 * - Top-level function declarations stay where they are (hoisted as usual) and are copied to
 *   the global object when the cell starts.
 * - `import` declarations become `await HELPER.import(...)`; `import(...)` and `import.meta`
 *   go through the helper too, so modules resolve from the context's cwd.
 *
 * Line numbers are kept (each generated replacement has as many line breaks as what it
 * replaces), so stack traces point at the user's lines.
 */

/** The wrapper's parameter: the kernel's helper object (import, import.meta). */
export const HELPER = "__warren$";
/** Where the kernel puts the helper object before running a cell: `globalThis[Symbol.for(HELPER_KEY)]`. */
export const HELPER_KEY = "warren.kernel.helper";
/** The helper, as a cell's script reads it (built now: a cell may replace JSON). */
const HELPER_LOOKUP = `this[Symbol.for(${JSON.stringify(HELPER_KEY)})]`;

export interface CellScript {
  /** The script to run with vm; its completion value is a promise of the cell's value. */
  readonly code: string;
  /** How many characters the wrapper put before the cell's first line (for columnOffset). */
  readonly prefixLength: number;
  /** Names made global by the cell. */
  readonly globals: readonly string[];
}

/** A cell that does not parse: reported like a thrown SyntaxError. */
export class CellSyntaxError extends Error {
  override readonly name = "SyntaxError";
  constructor(
    message: string,
    /** The offending line with a caret under the position, when known. */
    readonly excerpt: string,
  ) {
    super(message);
  }
}

export function transformCell(source: string): CellScript {
  // `{ a: 1 }` is an object to whoever types it in a notebook (Node's REPL agrees), not a
  // block with a label.
  if (/^\s*\{/.test(source) && /\}\s*$/.test(source)) {
    try {
      return transformStatements(`(${source})`);
    } catch {
      // a block after all
    }
  }
  return transformStatements(source);
}

function transformStatements(source: string): CellScript {
  // A hashbang is only valid at the very start of a script, where the wrapper now is.
  const stripped = stripTypes(source.startsWith("#!") ? `//${source.slice(2)}` : source);
  const program = parseCell(stripped);
  const edits = new Edits(stripped);
  const globals = new Set<string>();
  const functions: string[] = [];

  for (const statement of program.body) {
    rewriteTopLevel(statement, edits, globals, functions);
  }
  fullAncestor(program, (node, _state, ancestors) => {
    rewriteNested(node, ancestors, edits, globals);
  });
  const last = program.body.at(-1);
  if (last?.type === "ExpressionStatement") {
    edits.insert(last.start, "return (");
    edits.insert(last.expression.end, ")");
  }

  const declared = globals.size > 0 ? `var ${[...globals].join(", ")}; ` : "";
  const published = functions.map((name) => `this.${name} = ${name}; `).join("");
  const prefix = `${declared}(async (${HELPER}) => { ${published}`;
  const code = `${prefix}${edits.apply()}\n})(${HELPER_LOOKUP})`;
  return { code, prefixLength: prefix.length, globals: [...globals, ...functions] };
}

function stripTypes(source: string): string {
  try {
    return sucrase(source, {
      transforms: ["typescript"],
      // A cell's imports are often used only by later cells: keep them all.
      keepUnusedImports: true,
      // Only types go; syntax Node 20 runs (class fields, `?.`) stays as written.
      disableESTransforms: true,
    }).code;
  } catch {
    // Not TypeScript sucrase understands; acorn says what is wrong with it, if anything.
    return source;
  }
}

function parseCell(source: string): Program {
  try {
    return parse(source, {
      ecmaVersion: "latest",
      // A sloppy script (like Node's REPL), with module syntax and top-level await allowed.
      sourceType: "script",
      allowImportExportEverywhere: true,
      allowAwaitOutsideFunction: true,
      allowReturnOutsideFunction: true,
    });
  } catch (err) {
    const e = err as SyntaxError & { loc?: { line: number; column: number } };
    throw new CellSyntaxError(e.message, e.loc ? excerpt(source, e.loc.line, e.loc.column) : "");
  }
}

function excerpt(source: string, line: number, column: number): string {
  const text = source.split("\n")[line - 1] ?? "";
  return `${text}\n${" ".repeat(column)}^`;
}

/** Rewrites one statement of the cell's top level; collects the names it makes global. */
function rewriteTopLevel(
  statement: AnyNode,
  edits: Edits,
  globals: Set<string>,
  functions: string[],
): void {
  switch (statement.type) {
    case "VariableDeclaration":
      // `var` is handled with the nested ones (it may also sit inside blocks and loops).
      if (statement.kind !== "var") declarationToAssignment(statement, "list", edits, globals);
      return;
    case "ClassDeclaration":
      if (!statement.id) return; // only `export default class {}` has none; handled there
      globals.add(statement.id.name);
      edits.insert(statement.start, `;${statement.id.name} = `);
      edits.insert(statement.end, ";");
      return;
    case "FunctionDeclaration":
      if (statement.id) functions.push(statement.id.name);
      return;
    case "ImportDeclaration":
      edits.replace(
        statement.start,
        statement.end,
        importToAwait(statement, edits.source, globals),
      );
      return;
    case "ExportNamedDeclaration":
      if (statement.declaration) {
        edits.replace(statement.start, statement.declaration.start, "");
        rewriteTopLevel(statement.declaration, edits, globals, functions);
      } else {
        // `export { a }` and `export ... from`: nothing to export to in a notebook.
        edits.replace(statement.start, statement.end, ";");
      }
      return;
    case "ExportDefaultDeclaration": {
      const declaration = statement.declaration;
      edits.replace(statement.start, declaration.start, "");
      if (
        (declaration.type === "FunctionDeclaration" || declaration.type === "ClassDeclaration") &&
        declaration.id
      ) {
        rewriteTopLevel(declaration, edits, globals, functions);
      } else {
        // An anonymous function or class, or an expression: evaluated, then dropped.
        edits.insert(declaration.start, ";(");
        edits.insert(declaration.end, ");");
      }
      return;
    }
    case "ExportAllDeclaration":
      edits.replace(statement.start, statement.end, ";");
      return;
    default:
      return;
  }
}

/** Rewrites what may appear at any depth: `var` outside functions, `import()`, `import.meta`. */
function rewriteNested(node: AnyNode, ancestors: AnyNode[], edits: Edits, globals: Set<string>) {
  if (node.type === "ImportExpression") {
    edits.replace(node.start, node.start + "import".length, `${HELPER}.import`);
  } else if (node.type === "MetaProperty" && node.meta.name === "import") {
    edits.replace(node.start, node.end, `${HELPER}.meta`);
  } else if (node.type === "VariableDeclaration" && node.kind === "var") {
    if (ancestors.some(isFunctionScope)) return;
    declarationToAssignment(node, placeOf(node, ancestors.at(-2)), edits, globals);
  }
}

function isFunctionScope(node: AnyNode): boolean {
  return (
    node.type === "FunctionDeclaration" ||
    node.type === "FunctionExpression" ||
    node.type === "ArrowFunctionExpression" ||
    node.type === "StaticBlock"
  );
}

/**
 * Where a declaration sits decides what may replace it: in a statement list a leading `;`
 * guards against the previous line running on (`x\n(a = 1)` would be a call); as the body of
 * an `if` or a label, that `;` would be the body; a loop head takes no `;`, and a for-in/of
 * target no parentheses.
 */
type Place = "list" | "single" | "for-init" | "for-in";

function placeOf(node: AnyNode, parent: AnyNode | undefined): Place {
  switch (parent?.type) {
    case "ForInStatement":
    case "ForOfStatement":
      return parent.left === node ? "for-in" : "single";
    case "ForStatement":
      return parent.init === node ? "for-init" : "single";
    case "Program":
    case "BlockStatement":
    case "StaticBlock":
    case "SwitchCase":
    case "ExportNamedDeclaration":
      return "list";
    default:
      return "single";
  }
}

/**
 * `const {a, b} = o, c = 1` → `;({a, b} = o, c = 1)`; `let x` → `x = void 0`; `var x` (no
 * initialiser) → `void 0`, keeping the value x already has, as `var` does.
 */
function declarationToAssignment(
  node: Extract<AnyNode, { type: "VariableDeclaration" }>,
  place: Place,
  edits: Edits,
  globals: Set<string>,
): void {
  const first = node.declarations[0];
  const last = node.declarations.at(-1);
  if (!first || !last) return;
  for (const declarator of node.declarations) {
    for (const name of patternNames(declarator.id)) globals.add(name);
  }
  if (place === "for-in") {
    edits.replace(node.start, first.start, "");
    return;
  }
  edits.replace(node.start, first.start, place === "list" ? ";(" : "(");
  for (const declarator of node.declarations) {
    if (declarator.init) continue;
    if (node.kind === "var") edits.replace(declarator.start, declarator.end, "void 0");
    else edits.insert(declarator.end, " = void 0");
  }
  edits.insert(last.end, ")");
}

function patternNames(pattern: Pattern): string[] {
  switch (pattern.type) {
    case "Identifier":
      return [pattern.name];
    case "ObjectPattern":
      return pattern.properties.flatMap((p) =>
        patternNames(p.type === "RestElement" ? p.argument : p.value),
      );
    case "ArrayPattern":
      return pattern.elements.flatMap((e) => (e ? patternNames(e) : []));
    case "RestElement":
      return patternNames(pattern.argument);
    case "AssignmentPattern":
      return patternNames(pattern.left);
    default:
      return [];
  }
}

/** `import d, { a as b } from "m" with { type: "json" }` → one awaited helper import. */
function importToAwait(
  node: Extract<AnyNode, { type: "ImportDeclaration" }>,
  source: string,
  globals: Set<string>,
): string {
  const options =
    node.attributes.length > 0
      ? `, { with: { ${node.attributes.map((a) => source.slice(a.start, a.end)).join(", ")} } }`
      : "";
  const load = `await ${HELPER}.import(${source.slice(node.source.start, node.source.end)}${options})`;
  let namespace: string | undefined;
  const fields: string[] = [];
  for (const specifier of node.specifiers) {
    const local = specifier.local.name;
    globals.add(local);
    if (specifier.type === "ImportNamespaceSpecifier") namespace = local;
    else if (specifier.type === "ImportDefaultSpecifier") fields.push(`default: ${local}`);
    else fields.push(`${source.slice(specifier.imported.start, specifier.imported.end)}: ${local}`);
  }
  if (namespace && fields.length > 0)
    return `;({ ${fields.join(", ")} } = ${namespace} = ${load});`;
  if (namespace) return `;${namespace} = ${load};`;
  if (fields.length > 0) return `;({ ${fields.join(", ")} } = ${load});`;
  return `;${load};`;
}

/** Non-overlapping text edits on the source; insertions at one place keep their order. */
class Edits {
  readonly #edits: { start: number; end: number; text: string; seq: number }[] = [];

  constructor(readonly source: string) {}

  insert(at: number, text: string): void {
    this.replace(at, at, text);
  }

  replace(start: number, end: number, text: string): void {
    // Keep every line where it was: the replacement carries the line breaks it removes.
    const breaks = countBreaks(this.source.slice(start, end)) - countBreaks(text);
    const padded = breaks > 0 ? text + "\n".repeat(breaks) : text;
    this.#edits.push({ start, end, text: padded, seq: this.#edits.length });
  }

  apply(): string {
    // By position; at one position, insertions before a replacement starting there.
    const sorted = [...this.#edits].sort(
      (a, b) =>
        a.start - b.start || Number(a.end > a.start) - Number(b.end > b.start) || a.seq - b.seq,
    );
    let out = "";
    let at = 0;
    for (const edit of sorted) {
      out += this.source.slice(at, edit.start) + edit.text;
      at = Math.max(at, edit.end);
    }
    return out + this.source.slice(at);
  }
}

function countBreaks(text: string): number {
  let n = 0;
  for (let i = text.indexOf("\n"); i !== -1; i = text.indexOf("\n", i + 1)) n++;
  return n;
}
