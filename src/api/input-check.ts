/**
 * One check of everything a caller sends, before any route sees it: every string (values and
 * keys) of the JSON body, every query parameter and every path segment. No field of this API is
 * multi-line text, so control characters (C0 including tab and newline, DEL, C1) are refused
 * everywhere, as are lone UTF-16 surrogates: PostgreSQL cannot store them (NUL in text, `\u0000`
 * or an unpaired surrogate in jsonb), and a lease whose state cannot be stored must never exist.
 * Nesting and string length are bounded too, so that no later step recurses or copies without end.
 */
import type { RequestHandler } from 'express';
import { ApiError } from './errors';

/** Room for a property query of the deepest kind allowed (src/domain/property-query.ts) given as an array inside a reservation. */
export const MAX_JSON_DEPTH = 40;
export const MAX_STRING_LENGTH = 64 * 1024;

/** What no string of this API may hold (also escaped where the Blazar import prints Blazar's own text). */
// eslint-disable-next-line no-control-regex
export const CONTROL_OR_LONE_SURROGATE = /[\u0000-\u001f\u007f-\u009f]|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** What is wrong with one string, if anything. */
export function stringProblem(text: string): string | undefined {
  if (text.length > MAX_STRING_LENGTH) return `must be at most ${MAX_STRING_LENGTH} characters`;
  if (CONTROL_OR_LONE_SURROGATE.test(text)) return 'must not contain control characters or invalid Unicode';
  return undefined;
}

const fieldPath = (parent: string, key: string | number) => (typeof key === 'number' ? `${parent}[${key}]` : parent ? `${parent}.${key}` : key);

/** The first problem in a parsed JSON value (or query), as "field: what is wrong". Recursion is bounded by MAX_JSON_DEPTH. */
export function inputProblem(value: unknown, path = '', depth = 0): string | undefined {
  const at = (problem: string) => `${path || 'body'}: ${problem}`;
  if (typeof value === 'string') {
    const problem = stringProblem(value);
    return problem && at(problem);
  }
  if (value === null || typeof value !== 'object') return undefined;
  if (depth >= MAX_JSON_DEPTH) return at(`nested too deeply (at most ${MAX_JSON_DEPTH} levels)`);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const problem = inputProblem(value[i], fieldPath(path, i), depth + 1);
      if (problem) return problem;
    }
    return undefined;
  }
  for (const [key, item] of Object.entries(value)) {
    const keyProblem = stringProblem(key);
    // The key itself cannot be echoed safely: name its parent.
    if (keyProblem) return `${path || 'body'}: field names ${keyProblem}`;
    const problem = inputProblem(item, fieldPath(path, key), depth + 1);
    if (problem) return problem;
  }
  return undefined;
}

/** Refuses (400, naming the field) a request with a hostile string anywhere; mounted after the JSON body parser. */
export const checkRequestInput: RequestHandler = (req, _res, next) => {
  for (const segment of req.path.split('/')) {
    let decoded: string;
    try {
      decoded = decodeURIComponent(segment);
    } catch {
      next(new ApiError(400, 'path: not valid percent-encoded UTF-8'));
      return;
    }
    const problem = stringProblem(decoded);
    if (problem) {
      next(new ApiError(400, `path: ${problem}`));
      return;
    }
  }
  const problem = inputProblem(req.query) ?? inputProblem(req.body);
  next(problem ? new ApiError(400, problem) : undefined);
};
