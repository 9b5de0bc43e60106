/**
 * The patch registry (workflows/patches.ts) is the one list of patches: workflow code names each
 * patch by its entry there, never by a string literal, and every entry is one the code uses.
 */
import ts from 'typescript';
import * as registry from '../workflows/patches';
import { lineOf, workflowSources } from './support/workflow-sources';

/** Every patched() / deprecatePatch() call in `source`, with its argument as written. */
function patchCalls(fileName: string, source: ts.SourceFile): Array<{ where: string; argument: string; literal: boolean }> {
  const calls: Array<{ where: string; argument: string; literal: boolean }> = [];
  const visit = (node: ts.Node): void => {
    if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && ['patched', 'deprecatePatch'].includes(node.expression.text)) {
      const [argument] = node.arguments;
      calls.push({ where: `${fileName}:${lineOf(node, source)}`, argument: argument?.getText(source) ?? '', literal: !argument || ts.isStringLiteralLike(argument) });
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return calls;
}

const calls = workflowSources().flatMap(({ fileName, source }) => patchCalls(fileName, source));
/** The registry's named entries (its other exports are the list and the retirement text). */
const entries = (Object.entries(registry) as Array<[string, unknown]>).filter((entry): entry is [string, registry.WorkflowPatch] => typeof entry[1] === 'object' && entry[1] !== null && !Array.isArray(entry[1]));

describe('the patch registry', () => {
  it('is what workflow code names its patches by: no string literal in patched() or deprecatePatch()', () => {
    expect(calls.length).toBeGreaterThan(10);
    expect(calls.filter((c) => c.literal).map((c) => `${c.where} ${c.argument}`)).toEqual([]);
    const named = new Set(entries.map(([name]) => `${name}.id`));
    expect(calls.filter((c) => !named.has(c.argument)).map((c) => `${c.where} ${c.argument}`)).toEqual([]);
  });

  it('lists each patch once, with a date, and only patches the code takes', () => {
    expect(registry.PATCHES.map((p) => p.id).sort()).toEqual(entries.map(([, p]) => p.id).sort());
    expect(new Set(registry.PATCHES.map((p) => p.id)).size).toBe(registry.PATCHES.length);
    for (const patch of registry.PATCHES) {
      expect(patch.introduced).toMatch(/^\d{4}-\d{2}-\d{2}$/);
      expect(new Date(`${patch.introduced}T00:00:00Z`).toISOString().slice(0, 10)).toBe(patch.introduced);
      expect(patch.oldBranch.length).toBeGreaterThan(0);
      expect(patch.oldHistories.length).toBeGreaterThan(0);
    }
    const used = new Set(calls.map((c) => c.argument));
    expect(entries.filter(([name]) => !used.has(`${name}.id`)).map(([name]) => name)).toEqual([]);
  });
});
