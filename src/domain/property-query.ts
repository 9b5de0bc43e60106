/**
 * Blazar's host property queries (`hypervisor_properties`, `resource_properties`), e.g.
 *   ["and", [">=", "$memory_mb", "4096"], ["==", "$gpu", "a100"]]
 * Comparisons are numeric when both sides are numbers ("10" > "9"), textual otherwise — Blazar
 * compares strings, so "10" < "9" there. `and`, `or` and `not` combine; "" and "[]" mean "any host".
 */

export type Comparison = '==' | '=' | '!=' | '>=' | '<=' | '>' | '<';
export type PropertyQuery =
  | { kind: 'any' }
  | { kind: 'compare'; op: Comparison; key: string; value: string }
  | { kind: 'and' | 'or'; parts: PropertyQuery[] }
  | { kind: 'not'; part: PropertyQuery };

const COMPARISONS = new Set<string>(['==', '=', '!=', '>=', '<=', '>', '<']);

/** Deeper queries are refused: real ones are a few levels deep, and every step over a query recurses. */
export const MAX_QUERY_DEPTH = 32;

export class PropertyQueryError extends Error {
  override readonly name = 'PropertyQueryError';
}

/** Parses a query given as JSON text (as the API receives it) or as an already-parsed value. */
export function parsePropertyQuery(input: unknown): PropertyQuery {
  if (input === undefined || input === null || input === '') return { kind: 'any' };
  let value: unknown = input;
  if (typeof input === 'string') {
    try {
      value = JSON.parse(input) as unknown;
    } catch {
      throw new PropertyQueryError(`not valid JSON: ${truncated(input)}`);
    }
  }
  if (Array.isArray(value) && value.length === 0) return { kind: 'any' };
  return parseNode(value, 1);
}

/** A part of a query for an error message: short, whatever its size. */
function shown(node: unknown): string {
  let text: string;
  try {
    text = JSON.stringify(node) ?? String(node);
  } catch {
    return 'a value too deeply nested to show'; // JSON.stringify overflows the stack first
  }
  return truncated(text);
}

function truncated(text: string): string {
  return text.length > 120 ? `${text.slice(0, 117)}...` : text;
}

function parseNode(node: unknown, depth: number): PropertyQuery {
  if (depth > MAX_QUERY_DEPTH) throw new PropertyQueryError(`the query is nested too deeply (at most ${MAX_QUERY_DEPTH} levels)`);
  if (!Array.isArray(node) || node.length === 0 || typeof node[0] !== 'string') {
    throw new PropertyQueryError(`expected ["op", "$key", "value"] or ["and", …], got ${shown(node)}`);
  }
  const [op, ...args] = node as [string, ...unknown[]];
  if (op === 'and' || op === 'or') {
    if (args.length === 0) throw new PropertyQueryError(`"${op}" needs at least one query`);
    return { kind: op, parts: args.map((arg) => parseNode(arg, depth + 1)) };
  }
  if (op === 'not') {
    if (args.length !== 1) throw new PropertyQueryError('"not" takes exactly one query');
    return { kind: 'not', part: parseNode(args[0], depth + 1) };
  }
  if (!COMPARISONS.has(op)) throw new PropertyQueryError(`unknown operator ${JSON.stringify(op)} (use == = != >= <= > < and or not)`);
  if (args.length !== 2) throw new PropertyQueryError(`${shown(node)}: a comparison is ["${op}", "$key", "value"]`);
  const [key, operand] = args;
  if (typeof key !== 'string' || !key.startsWith('$') || key.length < 2) {
    throw new PropertyQueryError(`${shown(node)}: the second element must name a property, like "$memory_mb"`);
  }
  if (typeof operand !== 'string' && typeof operand !== 'number' && typeof operand !== 'boolean') {
    throw new PropertyQueryError(`${shown(node)}: the value must be a string or a number`);
  }
  return { kind: 'compare', op: op as Comparison, key: key.slice(1), value: String(operand) };
}

/** Every property a query refers to, for the "unknown key" check and for capability-change protection. */
export function queryKeys(query: PropertyQuery): string[] {
  switch (query.kind) {
    case 'any':
      return [];
    case 'compare':
      return [query.key];
    case 'not':
      return queryKeys(query.part);
    default:
      return [...new Set(query.parts.flatMap(queryKeys))];
  }
}

const NUMBER = /^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/;

function compare(op: Comparison, actual: string, expected: string): boolean {
  const numeric = NUMBER.test(actual.trim()) && NUMBER.test(expected.trim());
  const order = numeric ? Math.sign(Number(actual) - Number(expected)) : actual < expected ? -1 : actual > expected ? 1 : 0;
  switch (op) {
    case '==':
    case '=':
      return order === 0;
    case '!=':
      return order !== 0;
    case '>=':
      return order >= 0;
    case '<=':
      return order <= 0;
    case '>':
      return order > 0;
    case '<':
      return order < 0;
  }
}

/** Whether a host with these properties matches; a property the host lacks matches no comparison. */
export function matchesQuery(query: PropertyQuery, properties: Readonly<Record<string, string | undefined>>): boolean {
  switch (query.kind) {
    case 'any':
      return true;
    case 'compare': {
      const actual = properties[query.key];
      return actual !== undefined && compare(query.op, actual, query.value);
    }
    case 'and':
      return query.parts.every((part) => matchesQuery(part, properties));
    case 'or':
      return query.parts.some((part) => matchesQuery(part, properties));
    case 'not':
      return !matchesQuery(query.part, properties);
  }
}
