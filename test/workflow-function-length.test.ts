/**
 * Workflow code stays readable on one screen: no function in workflows/ (declaration, expression,
 * arrow or method) is longer than 80 lines. A longer one is a phase or a step that wants a name.
 */
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const MAX_LINES = 80;
const WORKFLOWS = path.resolve(__dirname, '..', 'workflows');

interface LongFunction {
  where: string;
  name: string;
  lines: number;
}

function tsFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return tsFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

/** What a reader would call the function: its own name, the variable or property it is assigned to, else `(anonymous)`. */
function nameOf(node: ts.FunctionLikeDeclaration, source: ts.SourceFile): string {
  if (node.name) return node.name.getText(source);
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const parent = node.parent;
  if ((ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) && parent.name) return parent.name.getText(source);
  return '(anonymous)';
}

/** Every function-like node of `text` longer than `max` lines (first to last line, both counted). */
function longFunctions(fileName: string, text: string, max = MAX_LINES): LongFunction[] {
  const source = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
  const found: LongFunction[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart(source)).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      const lines = last - first + 1;
      if (lines > max) found.push({ where: `${fileName}:${first + 1}`, name: nameOf(node, source), lines });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('functions in workflows/', () => {
  it(`are each at most ${MAX_LINES} lines long`, () => {
    const files = tsFiles(WORKFLOWS);
    expect(files.length).toBeGreaterThan(5);
    const long = files.flatMap((file) => longFunctions(path.relative(path.dirname(WORKFLOWS), file), fs.readFileSync(file, 'utf8')));
    expect(long.map((f) => `${f.where} ${f.name}: ${f.lines} lines`)).toEqual([]);
  });

  it('are measured whatever their form: declarations, arrows, methods, nested ones', () => {
    const body = (n: number) => Array.from({ length: n }, (_, i) => `  step(${i});`).join('\n');
    const text = [
      `export async function whole(): Promise<void> {\n${body(79)}\n}`, // 81 lines
      `function fits(): void {\n${body(78)}\n}`, // 80 lines
      `const arrow = () => {\n${body(79)}\n};`,
      `class Holder {\n  method(): void {\n${body(79)}\n  }\n}`,
      `function outer(): void {\n  function inner(): void {\n${body(79)}\n  }\n}`,
    ].join('\n');
    const long = longFunctions('probe.ts', text);
    expect(long.map((f) => `${f.name}: ${f.lines}`)).toEqual(['whole: 81', 'arrow: 81', 'method: 81', 'outer: 83', 'inner: 81']);
  });
});
