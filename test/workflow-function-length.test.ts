/**
 * Workflow code stays readable on one screen: no function in workflows/ (declaration, expression,
 * arrow or method) is longer than 80 lines. A longer one is a phase or a step that wants a name.
 */
import ts from 'typescript';
import { lineOf, parseSource, workflowSources } from './support/workflow-sources';

const MAX_LINES = 80;

interface LongFunction {
  where: string;
  name: string;
  lines: number;
}

/** What a reader would call the function: its own name, the variable or property it is assigned to, else `(anonymous)`. */
function nameOf(node: ts.FunctionLikeDeclaration, source: ts.SourceFile): string {
  if (node.name) return node.name.getText(source);
  if (ts.isConstructorDeclaration(node)) return 'constructor';
  const parent = node.parent;
  if ((ts.isVariableDeclaration(parent) || ts.isPropertyAssignment(parent) || ts.isPropertyDeclaration(parent)) && parent.name) return parent.name.getText(source);
  return '(anonymous)';
}

/** Every function-like node of `source` longer than `max` lines (first to last line, both counted). */
function longFunctions(fileName: string, source: ts.SourceFile, max = MAX_LINES): LongFunction[] {
  const found: LongFunction[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && 'body' in node && node.body) {
      const first = lineOf(node, source);
      const lines = source.getLineAndCharacterOfPosition(node.getEnd()).line + 1 - first + 1;
      if (lines > max) found.push({ where: `${fileName}:${first}`, name: nameOf(node, source), lines });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('functions in workflows/', () => {
  it(`are each at most ${MAX_LINES} lines long`, () => {
    const sources = workflowSources();
    expect(sources.length).toBeGreaterThan(5);
    const long = sources.flatMap(({ fileName, source }) => longFunctions(fileName, source));
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
    const long = longFunctions('probe.ts', parseSource('probe.ts', text));
    expect(long.map((f) => `${f.name}: ${f.lines}`)).toEqual(['whole: 81', 'arrow: 81', 'method: 81', 'outer: 83', 'inner: 81']);
  });
});
