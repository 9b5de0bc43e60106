/** What a workflow's history says it cost Temporal: its tasks, commands and messages, counted by kind (bench:lease-cost). */
import type { History } from '@temporalio/common/lib/proto-utils';

type HistoryEvent = NonNullable<History['events']>[number];

/** The marker the SDK's core records for each local activity's result. */
export const LOCAL_ACTIVITY_MARKER = 'core_local_activity';

export interface HistoryCounts {
  events: number;
  workflowTasks: number;
  activities: number;
  localActivities: number;
  timers: number;
  childWorkflows: number;
  signals: number;
  updates: number;
  /** Search attribute upserts: each a visibility write. */
  searchAttributeUpserts: number;
  /** Activities and local activities by type (`local activityName`). */
  byType: Record<string, number>;
}

export function countHistory(events: readonly HistoryEvent[]): HistoryCounts {
  const count = (has: (e: HistoryEvent) => unknown) => events.filter((e) => has(e)).length;
  return {
    events: events.length,
    workflowTasks: count((e) => e.workflowTaskCompletedEventAttributes),
    activities: count((e) => e.activityTaskScheduledEventAttributes),
    localActivities: count((e) => e.markerRecordedEventAttributes?.markerName === LOCAL_ACTIVITY_MARKER),
    timers: count((e) => e.timerStartedEventAttributes),
    childWorkflows: count((e) => e.startChildWorkflowExecutionInitiatedEventAttributes),
    // Signals received and sent; updates accepted (each rejected one leaves no event).
    signals: count((e) => e.workflowExecutionSignaledEventAttributes ?? e.signalExternalWorkflowExecutionInitiatedEventAttributes),
    updates: count((e) => e.workflowExecutionUpdateAcceptedEventAttributes),
    searchAttributeUpserts: count((e) => e.upsertWorkflowSearchAttributesEventAttributes),
    byType: events.reduce<Record<string, number>>((types, e) => {
      const name = e.activityTaskScheduledEventAttributes ? e.activityTaskScheduledEventAttributes.activityType?.name : localActivityType(e);
      if (name) types[name] = (types[name] ?? 0) + 1;
      return types;
    }, {}),
  };
}

/** A local activity's type, from its marker's data (core's JSON: `activity_type`); undefined for other events. */
function localActivityType(e: HistoryEvent): string | undefined {
  if (e.markerRecordedEventAttributes?.markerName !== LOCAL_ACTIVITY_MARKER) return undefined;
  const data = e.markerRecordedEventAttributes.details?.data?.payloads?.[0]?.data;
  let type = '?';
  try {
    const parsed = JSON.parse(Buffer.from(data ?? []).toString('utf8')) as { activity_type?: unknown };
    if (typeof parsed.activity_type === 'string') type = parsed.activity_type;
  } catch {
    // not JSON: counted as an unknown type
  }
  return `local ${type}`;
}

/**
 * Whether the workflow is at rest: closed, or no workflow task owed since its last completed one
 * (only its commands' events follow that) and no activity still open: it waits on a condition or
 * a timer only.
 */
export function atRest(events: readonly HistoryEvent[]): boolean {
  const last = events[events.length - 1];
  if (!last) return false;
  const workflowClosed =
    last.workflowExecutionCompletedEventAttributes ??
    last.workflowExecutionFailedEventAttributes ??
    last.workflowExecutionContinuedAsNewEventAttributes ??
    last.workflowExecutionTerminatedEventAttributes ??
    last.workflowExecutionTimedOutEventAttributes ??
    last.workflowExecutionCanceledEventAttributes;
  if (workflowClosed) return true;
  const lastIndex = (has: (e: HistoryEvent) => unknown) => events.reduce((found, e, i) => (has(e) ? i : found), -1);
  if (lastIndex((e) => e.workflowTaskCompletedEventAttributes) < lastIndex((e) => e.workflowTaskScheduledEventAttributes)) return false;
  const scheduled = events.filter((e) => e.activityTaskScheduledEventAttributes).length;
  const closed = events.filter((e) => e.activityTaskCompletedEventAttributes ?? e.activityTaskFailedEventAttributes ?? e.activityTaskTimedOutEventAttributes ?? e.activityTaskCanceledEventAttributes).length;
  return closed === scheduled;
}

/** Counts summed over several histories, then divided by `per` (e.g. per lease), to one decimal. */
export function averageCounts(all: readonly HistoryCounts[], per: number): HistoryCounts {
  const sum = (key: Exclude<keyof HistoryCounts, 'byType'>) => Math.round((all.reduce((total, c) => total + c[key], 0) / Math.max(1, per)) * 10) / 10;
  const byType: Record<string, number> = {};
  for (const name of new Set(all.flatMap((c) => Object.keys(c.byType)))) byType[name] = Math.round((all.reduce((total, c) => total + (c.byType[name] ?? 0), 0) / Math.max(1, per)) * 10) / 10;
  return { events: sum('events'), workflowTasks: sum('workflowTasks'), activities: sum('activities'), localActivities: sum('localActivities'), timers: sum('timers'), childWorkflows: sum('childWorkflows'), signals: sum('signals'), updates: sum('updates'), searchAttributeUpserts: sum('searchAttributeUpserts'), byType };
}
