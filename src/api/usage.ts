/**
 * Accounting (an extension): `GET /v1/usage` answers the resource-hours booked and used within a
 * window ([from, to), by default this calendar month so far), per project, resource type and/or
 * month (`group_by`), as JSON or, with `Accept: text/csv`, as CSV. Members see their own project;
 * admins every project, or `project_id`'s. The figures come from src/domain/usage.ts, the meter the
 * usage policy counts with, so that a report and a refusal never disagree: raw, as charged
 * (preemptible hours at LK_PREEMPTIBLE_CHARGE_FACTOR), and the preemptible part; lenders' groups
 * add what they lent and their credit (host_lendings and quantity_lendings, issue 43).
 */
import { Router } from 'express';
import { z } from 'zod';
import type { Pool } from '../db/pool';
import { meteredLeaseBatches } from '../db/leases';
import { meteredLendingBatches } from '../db/host-lendings';
import { meteredSlotLendingBatches } from '../db/quantity-lendings';
import { formatBlazarDate } from '../domain/dates';
import { monthOf } from '../domain/usage';
import { FIGURE_NAMES, GROUP_FIELDS, GROUP_KEYS, TooManyGroups, UsageReport, type GroupKey, type UsageGroup } from '../domain/usage-report';
import { identityOf } from './auth';
import { ApiError, parseRequest } from './errors';
import { requestDateSchema } from './lease-schemas';

/** The longest window one report may cover (a bound on what one request reads). */
const MAX_SPAN_MS = 10 * 366 * 86_400_000;
/** Groups in one answer (~400 bytes of JSON each). */
export const MAX_USAGE_GROUPS = 100_000;
/** Leases per query: each is metered before the next batch is read. */
const BATCH_SIZE = 500;
/** Metering between two turns of the event loop: a lease of many reservations over many months costs more than a lease. */
const TURN_MS = 10;
/** Groups formatted between two turns (~3 ms). */
const RENDER_CHUNK = 1000;

const GROUP_BY_HINT = `expected a comma-separated list of ${GROUP_KEYS.join(', ')}`;

const groupByParam = z.string({ error: GROUP_BY_HINT }).max(64, GROUP_BY_HINT).transform((text, ctx): GroupKey[] => {
  const keys = text.split(',').map((key) => key.trim());
  const unknown = keys.filter((key) => !(GROUP_KEYS as readonly string[]).includes(key));
  if (unknown.length > 0) ctx.addIssue({ code: 'custom', message: `unknown ${unknown.map((k) => JSON.stringify(k)).join(', ')}: ${GROUP_BY_HINT}` });
  else if (new Set(keys).size !== keys.length) ctx.addIssue({ code: 'custom', message: `each of ${GROUP_KEYS.join(', ')} at most once` });
  return unknown.length > 0 ? z.NEVER : (keys as GroupKey[]);
});

export const usageQuery = z.strictObject({
  project_id: z.string({ error: 'expected a project id' }).min(1, 'must not be empty').max(255, 'must be at most 255 characters').optional(),
  from: requestDateSchema.optional().describe('the start of the window (default: the start of the current month, UTC)'),
  to: requestDateSchema.optional().describe('the end of the window, excluded (default: now)'),
  group_by: groupByParam.optional().describe(`${GROUP_KEYS.join(', ')}, or several, comma-separated (default: project)`),
});

/** The report's window: the query's, or from the start of this month (UTC) to now. */
function windowOf(query: z.output<typeof usageQuery>, nowMs: number): { startMs: number; endMs: number } {
  const startMs = query.from ?? monthOf(nowMs).startMs;
  const endMs = query.to ?? nowMs;
  // Both defaults at once make an empty window only in the first millisecond of a month: then it is empty.
  if (endMs <= startMs && (query.from !== undefined || query.to !== undefined)) {
    throw new ApiError(400, `to: must be after from (${formatBlazarDate(startMs)})${query.to === undefined ? '; to is now unless given' : ''}`);
  }
  if (endMs - startMs > MAX_SPAN_MS) throw new ApiError(400, 'to: at most ten years after from');
  return { startMs, endMs };
}

/** Lets other requests run: a report over every lease never holds the event loop for long. */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

export function usageRouter(deps: { pool: Pool; preemptibleChargeFactor: number }): Router {
  const router = Router();

  router.get('/usage', async (req, res) => {
    const identity = identityOf(res);
    const query = parseRequest(usageQuery, req.query);
    if (!identity.isAdmin && query.project_id !== undefined && query.project_id !== identity.projectId) {
      throw new ApiError(403, "only admins can see other projects' usage");
    }
    const nowMs = Date.now();
    const window = windowOf(query, nowMs);
    const groupBy = query.group_by ?? ['project'];
    const report = new UsageReport({ window, nowMs, groupBy, preemptibleChargeFactor: deps.preemptibleChargeFactor, maxGroups: MAX_USAGE_GROUPS });
    let gone = false; // the client went away: nobody wants the rest
    res.once('close', () => {
      gone = true;
    });
    try {
      let turnStarted = performance.now();
      const filter = { projectId: identity.isAdmin ? query.project_id : identity.projectId, span: window };
      for await (const batch of meteredLeaseBatches(deps.pool, filter, BATCH_SIZE)) {
        for (const metered of batch) {
          report.add(metered);
          if (performance.now() - turnStarted > TURN_MS) {
            await nextTurn();
            if (gone) return;
            turnStarted = performance.now();
          }
        }
      }
      // Lent hosts and slots are few next to leases (one row per host and lending): a batch is metered in one turn.
      for (const batches of [meteredLendingBatches(deps.pool, filter, BATCH_SIZE), meteredSlotLendingBatches(deps.pool, filter, BATCH_SIZE)]) {
        for await (const batch of batches) {
          for (const lending of batch) report.addLending(lending);
          await nextTurn();
          if (gone) return;
        }
      }
    } catch (err) {
      if (err instanceof TooManyGroups) {
        throw new ApiError(400, `the report would have more than ${err.limit} groups: narrow it (a shorter window, a project_id, or fewer group_by keys)`);
      }
      throw err;
    }
    // Shown a thousand groups at a time, other requests running in between (100 000 groups: ~40 MB of JSON).
    res.vary('Accept');
    const csv = req.accepts(['application/json', 'text/csv']) === 'text/csv';
    const parts = [
      csv
        ? csvHeader(groupBy)
        : `{"usage":{"from":"${formatBlazarDate(window.startMs)}","to":"${formatBlazarDate(window.endMs)}","group_by":${JSON.stringify(groupBy)},"preemptible_charge_factor":${deps.preemptibleChargeFactor},"groups":[`,
    ];
    let shown = 0;
    for (const group of report.groupsInOrder()) {
      parts.push(csv ? csvLine(group, groupBy) : `${shown > 0 ? ',' : ''}${JSON.stringify(group)}`);
      if (++shown % RENDER_CHUNK === 0) {
        await nextTurn();
        if (gone) return;
      }
    }
    if (!csv) parts.push(`],"total":${JSON.stringify(report.total())}}}`);
    res.type(csv ? 'text/csv; charset=utf-8' : 'application/json').send(parts.join(''));
  });

  return router;
}

/**
 * A CSV field: quoted when it holds a comma, a quote or a line break; text that a spreadsheet would
 * run as a formula (=, +, -, @, tab, CR first: a project id is the caller's to choose) gets a leading '.
 */
function csvField(value: string | number): string {
  if (typeof value === 'number') return String(value);
  const text = /^[=+\-@\t\r]/.test(value) ? `'${value}` : value;
  return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
}

/**
 * CSV (RFC 4180): a header line, then one line per group: its keys, the booked and used figures and
 * the lease count, then the same as charged, the preemptible part, and the host-hours lent and the
 * lender's credit (zeros when none).
 */
function csvHeader(groupBy: readonly GroupKey[]): string {
  const figureColumns = (prefix: string) => [...FIGURE_NAMES.map((f) => `${prefix}booked_${f}`), ...FIGURE_NAMES.map((f) => `${prefix}used_${f}`)];
  return csvRecord([...groupBy.map((key) => GROUP_FIELDS[key]), ...figureColumns(''), 'leases', ...figureColumns('charged_'), ...figureColumns('preemptible_'), 'preemptible_leases', 'lent_host_hours', 'borrowed_credit_hours']);
}

function csvLine(group: UsageGroup, groupBy: readonly GroupKey[]): string {
  const figureFields = (part: { booked: UsageGroup['booked']; used: UsageGroup['used'] } | undefined) => [...FIGURE_NAMES.map((f) => part?.booked[f] ?? 0), ...FIGURE_NAMES.map((f) => part?.used[f] ?? 0)];
  return csvRecord([...groupBy.map((key) => group[GROUP_FIELDS[key]] ?? ''), ...figureFields(group), group.leases, ...figureFields(group.charged), ...figureFields(group.preemptible), group.preemptible?.leases ?? 0, group.lent?.host_hours ?? 0, group.borrowed_credit_hours ?? 0]);
}

const csvRecord = (fields: Array<string | number>): string => `${fields.map(csvField).join(',')}\r\n`;
