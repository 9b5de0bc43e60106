/** The workflow code's sources, parsed with the TypeScript compiler API, for tests that check how it is written. */
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

const WORKFLOWS = path.resolve(__dirname, '..', '..', 'workflows');

export interface WorkflowSource {
  /** Relative to the repository, e.g. `workflows/lease/lease.ts`. */
  fileName: string;
  source: ts.SourceFile;
}

function tsFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return tsFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

export function parseSource(fileName: string, text: string): ts.SourceFile {
  return ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, true, ts.ScriptKind.TS);
}

/** Every .ts file under workflows/, parsed. */
export function workflowSources(): WorkflowSource[] {
  return tsFiles(WORKFLOWS).map((file) => {
    const fileName = path.relative(path.dirname(WORKFLOWS), file).split(path.sep).join('/');
    return { fileName, source: parseSource(fileName, fs.readFileSync(file, 'utf8')) };
  });
}

/** The 1-based line `node` starts on. */
export function lineOf(node: ts.Node, source: ts.SourceFile): number {
  return source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1;
}
