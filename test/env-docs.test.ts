/**
 * Every environment variable the code reads is documented exactly once: as the first cell of one
 * table row in README.md, docs/*.md or scripts/openstack/README.md (names in backticks, several
 * per row separated by " / "), and every documented LK_ variable is still read somewhere.
 *
 * The variables read are taken from the code's syntax, not from a grep of names:
 * - TypeScript (parsed): `process.env.X`, `process.env['X']`, `process.env[CONST]` (a string
 *   constant), the same on a variable or parameter typed `NodeJS.ProcessEnv` or set from
 *   `process.env`, its destructuring, string arguments of a local accessor that indexes the
 *   environment with its parameter (`get('OS_AUTH_URL')`), and the keys of a zod object named
 *   `envSchema` or `<something>EnvSchema` (what src/config.ts parses out of the environment: loadConfig's,
 *   the external filter's, OpenStack's client variables). Writes
 *   and deletes are not reads; a dynamic read this cannot resolve fails the test.
 * - Shell: `$X` / `${X…}` of a name that no script in the same directory assigns (the rig's
 *   scripts source each other), outside comments and quoted here-documents.
 * - Python: `os.environ.get('X')` / `os.getenv('X')`, and `os.environ['X']` unless a script in the
 *   same directory sets X for it (a hand-over, not a setting).
 * Variables of the platform itself (the shell's, HOME, libuv's) are not leasekeeper's to document.
 */
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';
import { REPO_ROOT } from '../src/paths';

const CODE_DIRS = ['src', 'worker', 'activities', 'workflows', 'dev-stack', 'scripts', 'bench', 'test'];
const DOCS = [
  'README.md',
  path.join('scripts', 'openstack', 'README.md'),
  ...fs.readdirSync(path.join(REPO_ROOT, 'docs')).filter((name) => name.endsWith('.md')).map((name) => path.join('docs', name)),
];
/** The platform's variables the code honours as the platform defines them. */
const PLATFORM = new Set(['HOME', 'PATH', 'UV_THREADPOOL_SIZE', 'BASH_SOURCE', 'BASH_REMATCH', 'BASHPID', 'PIPESTATUS']);
const NAME = /^[A-Z][A-Z0-9_]*$/;

function filesUnder(dir: string, ext: RegExp): string[] {
  const out: string[] = [];
  const walk = (at: string) => {
    for (const entry of fs.readdirSync(at, { withFileTypes: true })) {
      const full = path.join(at, entry.name);
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules' && entry.name !== 'results' && entry.name !== 'histories') walk(full);
      } else if (ext.test(entry.name)) out.push(full);
    }
  };
  walk(dir);
  return out;
}
const codeFiles = (ext: RegExp) => CODE_DIRS.flatMap((dir) => filesUnder(path.join(REPO_ROOT, dir), ext)).sort();

type Reads = Map<string, Set<string>>; // variable -> files (relative) that read it
function add(reads: Reads, name: string, file: string): void {
  if (!NAME.test(name) || PLATFORM.has(name)) return;
  if (!reads.has(name)) reads.set(name, new Set());
  reads.get(name)!.add(path.relative(REPO_ROOT, file));
}

// --- TypeScript ------------------------------------------------------------------------------

const isProcessEnv = (node: ts.Node): boolean =>
  ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'process' && node.name.text === 'env';

/** Identifiers in the file that hold the environment: typed NodeJS.ProcessEnv, or set from process.env. */
function envIdentifiers(source: ts.SourceFile): Set<string> {
  const names = new Set<string>();
  const visit = (node: ts.Node) => {
    if ((ts.isParameter(node) || ts.isVariableDeclaration(node) || ts.isPropertySignature(node)) && ts.isIdentifier(node.name)) {
      const typed = node.type !== undefined && node.type.getText(source) === 'NodeJS.ProcessEnv';
      const init = 'initializer' in node ? node.initializer : undefined;
      const fromEnv = init !== undefined && (isProcessEnv(init) || (ts.isBinaryExpression(init) && (isProcessEnv(init.left) || isProcessEnv(init.right))));
      if (typed || fromEnv) names.add(node.name.text);
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return names;
}

/** String constants anywhere in the TypeScript (`const WORKFLOW_BUNDLE_ENV = 'LK_TEST_WORKFLOW_BUNDLE'`). */
function stringConstants(sources: ts.SourceFile[]): Map<string, string> {
  const constants = new Map<string, string>();
  for (const source of sources) {
    const visit = (node: ts.Node) => {
      if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && node.initializer && ts.isStringLiteral(node.initializer)) {
        const list = node.parent;
        if (ts.isVariableDeclarationList(list) && list.flags & ts.NodeFlags.Const) constants.set(node.name.text, node.initializer.text);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return constants;
}

function isWrite(node: ts.Node): boolean {
  const parent = node.parent;
  if (ts.isDeleteExpression(parent)) return true;
  return ts.isBinaryExpression(parent) && parent.left === node && parent.operatorToken.kind === ts.SyntaxKind.EqualsToken;
}

function enclosingFunction(node: ts.Node): ts.SignatureDeclaration | undefined {
  for (let at: ts.Node | undefined = node.parent; at; at = at.parent) {
    if (ts.isArrowFunction(at) || ts.isFunctionDeclaration(at) || ts.isFunctionExpression(at) || ts.isMethodDeclaration(at)) return at;
  }
  return undefined;
}

/** The name a function is called by: its declaration's, or the variable's it is assigned to. */
function functionName(fn: ts.SignatureDeclaration): string | undefined {
  if (ts.isFunctionDeclaration(fn) && fn.name) return fn.name.text;
  if (ts.isVariableDeclaration(fn.parent) && ts.isIdentifier(fn.parent.name)) return fn.parent.name.text;
  return undefined;
}

function typescriptReads(reads: Reads, unresolved: string[]): void {
  // The JavaScript too: the jest and ESLint configurations at the root read settings as well.
  const rootConfigs = fs.readdirSync(REPO_ROOT).filter((name) => /\.(js|mjs|cjs)$/.test(name)).map((name) => path.join(REPO_ROOT, name));
  const files = [...codeFiles(/\.(ts|js|mjs|cjs)$/), ...rootConfigs].filter((file) => !file.endsWith('.d.ts'));
  const sources = files.map((file) => ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true));
  const constants = stringConstants(sources);
  for (const source of sources) {
    const file = source.fileName;
    const envs = envIdentifiers(source);
    const isEnv = (node: ts.Node) => isProcessEnv(node) || (ts.isIdentifier(node) && envs.has(node.text));
    const accessors = new Set<string>(); // local functions that read env[theirParameter]
    const schemaKeys: string[] = [];
    const dynamic: ts.Node[] = [];
    const visit = (node: ts.Node) => {
      if (ts.isPropertyAccessExpression(node) && isEnv(node.expression) && !isWrite(node)) add(reads, node.name.text, file);
      if (ts.isElementAccessExpression(node) && isEnv(node.expression) && !isWrite(node)) {
        const arg = node.argumentExpression;
        const fn = enclosingFunction(node);
        const param = fn?.parameters.find((p) => ts.isIdentifier(p.name) && ts.isIdentifier(arg) && p.name.text === arg.text);
        const accessor = fn && param ? functionName(fn) : undefined;
        if (ts.isStringLiteral(arg) || ts.isNoSubstitutionTemplateLiteral(arg)) add(reads, arg.text, file);
        else if (accessor) accessors.add(accessor);
        else if (ts.isIdentifier(arg) && constants.has(arg.text)) add(reads, constants.get(arg.text)!, file);
        else dynamic.push(node);
      }
      if (ts.isVariableDeclaration(node) && ts.isObjectBindingPattern(node.name) && node.initializer && isEnv(node.initializer)) {
        for (const element of node.name.elements) add(reads, (element.propertyName ?? element.name).getText(source), file);
      }
      if (ts.isVariableDeclaration(node) && ts.isIdentifier(node.name) && /^(env|\w+Env)Schema$/.test(node.name.text) && node.initializer && ts.isCallExpression(node.initializer)) {
        const shape = node.initializer.arguments[0];
        if (shape && ts.isObjectLiteralExpression(shape)) {
          for (const property of shape.properties) if (property.name && ts.isIdentifier(property.name)) schemaKeys.push(property.name.text);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
    const calls = (node: ts.Node) => {
      if (ts.isCallExpression(node) && ts.isIdentifier(node.expression) && accessors.has(node.expression.text)) {
        const arg = node.arguments[0];
        if (arg && ts.isStringLiteral(arg)) add(reads, arg.text, file);
      }
      ts.forEachChild(node, calls);
    };
    calls(source);
    for (const key of schemaKeys) add(reads, key, file);
    // A read by a computed name is resolved only where the file's envSchema lists what it may be.
    if (schemaKeys.length === 0) {
      for (const node of dynamic) {
        const { line } = source.getLineAndCharacterOfPosition(node.getStart());
        unresolved.push(`${path.relative(REPO_ROOT, file)}:${line + 1}: ${node.getText(source)}`);
      }
    }
  }
}

// --- shell and Python ------------------------------------------------------------------------

/** Lines of a shell script that are code: comments dropped, here-documents marked by quoting. */
function shellLines(text: string): Array<{ line: string; heredoc: 'none' | 'expanding' | 'literal' }> {
  const out: Array<{ line: string; heredoc: 'none' | 'expanding' | 'literal' }> = [];
  let until: string | undefined;
  let quoted = false;
  for (const raw of text.split('\n')) {
    if (until !== undefined) {
      if (raw.trim() === until) until = undefined;
      else out.push({ line: raw, heredoc: quoted ? 'literal' : 'expanding' });
      continue;
    }
    const line = raw.replace(/(^|\s)#(\s.*|!.*)?$/, '');
    const opens = /<<-?\s*(['"]?)(\w+)\1/.exec(line);
    if (opens) {
      until = opens[2];
      quoted = opens[1] !== '';
    }
    out.push({ line, heredoc: 'none' });
  }
  return out;
}

/** Names a shell script gives a value: assignments (also for one command), export/local/read/for lists. */
function shellAssigned(text: string): Set<string> {
  const names = new Set<string>();
  for (const { line, heredoc } of shellLines(text)) {
    if (heredoc !== 'none') continue;
    for (const m of line.matchAll(/(?:^|[\s;(&|])([A-Za-z_]\w*)(?:\[[^\]]*\])?\+?=/g)) names.add(m[1]);
    for (const m of line.matchAll(/\b(?:export|local|declare|readonly|read|mapfile)((?:\s+-\w+)*(?:\s+[A-Za-z_]\w*(?:=\S*)?)+)/g)) {
      for (const word of m[1].trim().split(/\s+/)) if (!word.startsWith('-')) names.add(word.split('=')[0]);
    }
    for (const m of line.matchAll(/\bfor\s+(?:\(\(\s*)?([A-Za-z_]\w*)/g)) names.add(m[1]);
  }
  return names;
}

function shellAndPythonReads(reads: Reads): void {
  const shellFiles = codeFiles(/\.sh$/);
  const assignedIn = new Map<string, Set<string>>(); // directory -> names its scripts assign
  for (const file of shellFiles) {
    const dir = path.dirname(file);
    const names = assignedIn.get(dir) ?? new Set<string>();
    for (const name of shellAssigned(fs.readFileSync(file, 'utf8'))) names.add(name);
    assignedIn.set(dir, names);
  }
  for (const file of shellFiles) {
    const own = assignedIn.get(path.dirname(file))!;
    for (const { line, heredoc } of shellLines(fs.readFileSync(file, 'utf8'))) {
      if (heredoc === 'literal') continue;
      // Single-quoted text expands nothing (awk programs, printf formats), except inside a here-document.
      const code = heredoc === 'expanding' ? line : line.replace(/'[^']*'/g, "''");
      for (const m of code.matchAll(/\$\{?#?([A-Za-z_]\w*)/g)) if (!own.has(m[1])) add(reads, m[1], file);
    }
  }
  for (const file of codeFiles(/\.py$/)) {
    const text = fs.readFileSync(file, 'utf8');
    const handedOver = assignedIn.get(path.dirname(file)) ?? new Set<string>();
    for (const m of text.matchAll(/os\.(?:environ\.get|getenv)\(\s*['"](\w+)['"]/g)) add(reads, m[1], file);
    for (const m of text.matchAll(/os\.environ\[\s*['"](\w+)['"]\s*\]/g)) if (!handedOver.has(m[1])) add(reads, m[1], file);
  }
}

// --- documentation ---------------------------------------------------------------------------

/** Table rows' first cells, outside fenced code: the variables each row defines, with where. */
function documentedRows(): Array<{ where: string; names: string[] }> {
  const rows: Array<{ where: string; names: string[] }> = [];
  for (const doc of DOCS) {
    const lines = fs.readFileSync(path.join(REPO_ROOT, doc), 'utf8').split('\n');
    let fenced = false;
    lines.forEach((line, i) => {
      if (/^\s*```/.test(line)) fenced = !fenced;
      if (fenced || !/^\s*\|/.test(line)) return;
      const first = line.split('|')[1] ?? '';
      const names = first.split(' / ').flatMap((part) => [...part.matchAll(/`([^`]+)`/g)].map((m) => m[1]).filter((name) => NAME.test(name)));
      if (names.length > 0) rows.push({ where: `${doc}:${i + 1}`, names });
    });
  }
  return rows;
}

describe('environment variables', () => {
  const reads: Reads = new Map();
  const unresolved: string[] = [];
  typescriptReads(reads, unresolved);
  shellAndPythonReads(reads);
  const rows = documentedRows();
  const rowsOf = new Map<string, string[]>();
  for (const row of rows) for (const name of row.names) rowsOf.set(name, [...(rowsOf.get(name) ?? []), row.where]);

  it('reads each variable by a name the extraction can tell', () => {
    expect(reads.size).toBeGreaterThan(100);
    for (const name of ['LK_API_PORT', 'LK_POLICY_EXTERNAL_FAIL', 'OS_USERNAME', 'LK_TEST_WORKFLOW_BUNDLE', 'LK_OS_READY_TIMEOUT', 'LK_OS_STOP_TIMEOUT', 'TEMPORAL_ADDRESS']) {
      expect([name, reads.has(name)]).toEqual([name, true]);
    }
    for (const name of ['RUN', 'KEYSTONE_URL', 'NOVA_CELL0_DB', 'T0', 'LK_NOVA_URL']) expect([name, reads.has(name)]).toEqual([name, false]);
    expect(unresolved).toEqual([]);
  });

  it('reads the environment in src only through src/config.ts', () => {
    const readers = new Set([...reads.values()].flatMap((files) => [...files]).filter((file) => file.startsWith(`src${path.sep}`)));
    expect([...readers]).toEqual([path.join('src', 'config.ts')]);
  });

  it('documents every variable the code reads', () => {
    const missing = [...reads.keys()].filter((name) => !rowsOf.has(name)).sort();
    const shown = missing.map((name) => `${name} (${[...reads.get(name)!].join(', ')})`);
    expect(shown).toEqual([]);
  });

  it('documents each variable in one row only', () => {
    const twice = [...rowsOf].filter(([, where]) => where.length > 1).map(([name, where]) => `${name}: ${where.join(', ')}`);
    expect(twice).toEqual([]);
  });

  it('documents no LK_ variable the code does not read', () => {
    const stale = [...rowsOf].filter(([name]) => name.startsWith('LK_') && !reads.has(name)).map(([name, where]) => `${name}: ${where.join(', ')}`);
    expect(stale).toEqual([]);
  });
});
