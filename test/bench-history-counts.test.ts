/** bench:lease-cost's counting of a workflow's history (bench/history-counts.ts): by kind, by activity type, and when it is at rest. */
import fs from 'node:fs';
import path from 'node:path';
import { historyFromJSON } from '@temporalio/common/lib/proto-utils';
import { atRest, averageCounts, countHistory, LOCAL_ACTIVITY_MARKER } from '../bench/history-counts';

const localActivity = (type: string) => ({
  markerRecordedEventAttributes: { markerName: LOCAL_ACTIVITY_MARKER, details: { data: { payloads: [{ data: Buffer.from(JSON.stringify({ seq: 1, activity_type: type })) }] } } },
});
const activity = (type: string) => ({ activityTaskScheduledEventAttributes: { activityType: { name: type } } });
const started = { workflowExecutionStartedEventAttributes: {} };
const taskScheduled = { workflowTaskScheduledEventAttributes: {} };
const taskCompleted = { workflowTaskCompletedEventAttributes: {} };

describe('bench history counts', () => {
  it('counts tasks, activities, local activities by type, timers, children, signals, updates and search attribute upserts; other markers are not local activities', () => {
    const events = [
      started,
      taskScheduled,
      taskCompleted,
      localActivity('recordLease'),
      localActivity('announceNotice'),
      localActivity('announceNotice'),
      { markerRecordedEventAttributes: { markerName: 'core_patch' } },
      activity('startReservation'),
      { timerStartedEventAttributes: {} },
      { startChildWorkflowExecutionInitiatedEventAttributes: {} },
      { workflowExecutionSignaledEventAttributes: {} },
      { signalExternalWorkflowExecutionInitiatedEventAttributes: {} },
      { workflowExecutionUpdateAcceptedEventAttributes: {} },
      { workflowExecutionUpdateCompletedEventAttributes: {} },
      { upsertWorkflowSearchAttributesEventAttributes: {} },
      taskScheduled,
      taskCompleted,
    ];
    expect(countHistory(events)).toEqual({
      events: 17,
      workflowTasks: 2,
      activities: 1,
      localActivities: 3,
      timers: 1,
      childWorkflows: 1,
      signals: 2,
      updates: 1,
      searchAttributeUpserts: 1,
      byType: { 'local recordLease': 1, 'local announceNotice': 2, startReservation: 1 },
    });
  });

  it('averages counts and types per lease, to one decimal', () => {
    const one = countHistory([taskCompleted, activity('a'), localActivity('b')]);
    const two = countHistory([taskCompleted, taskCompleted, activity('a'), activity('a')]);
    expect(averageCounts([one, two], 3)).toMatchObject({ events: 2.3, workflowTasks: 1, activities: 1, localActivities: 0.3, byType: { a: 1, 'local b': 0.3 } });
  });

  it('is at rest once no workflow task and no activity is open, or when closed', () => {
    // Commands' events follow the completed task: still at rest.
    expect(atRest([started, taskScheduled, taskCompleted, localActivity('recordLease'), { timerStartedEventAttributes: {} }])).toBe(true);
    expect(atRest([started, taskScheduled])).toBe(false);
    expect(atRest([started, taskScheduled, taskCompleted, { timerFiredEventAttributes: {} }, taskScheduled])).toBe(false);
    expect(atRest([started, taskScheduled, taskCompleted, activity('endReservation')])).toBe(false);
    expect(atRest([started, taskScheduled, taskCompleted, activity('endReservation'), { activityTaskCompletedEventAttributes: {} }, taskScheduled, taskCompleted])).toBe(true);
    expect(atRest([started, taskScheduled, taskCompleted, { workflowExecutionCompletedEventAttributes: {} }])).toBe(true);
    expect(atRest([started, taskScheduled, { workflowExecutionTerminatedEventAttributes: {} }])).toBe(true);
    expect(atRest([started, taskScheduled, { workflowExecutionTimedOutEventAttributes: {} }])).toBe(true);
    expect(atRest([])).toBe(false);
  });

  it("reads a real recorded history's local activities by type, as the SDK's core writes their markers", () => {
    const json = JSON.parse(fs.readFileSync(path.join(__dirname, 'histories', 'admission-after-database-outage.json'), 'utf8')) as { events: Array<{ markerRecordedEventAttributes?: { markerName?: string }; activityTaskScheduledEventAttributes?: unknown }> };
    const counts = countHistory(historyFromJSON(json).events ?? []);
    const markers = json.events.filter((e) => e.markerRecordedEventAttributes?.markerName === LOCAL_ACTIVITY_MARKER).length;
    expect(markers).toBeGreaterThan(0);
    expect(counts.localActivities).toBe(markers);
    expect(counts.activities).toBe(json.events.filter((e) => e.activityTaskScheduledEventAttributes).length);
    expect(counts.byType['local reserveReservation']).toBeGreaterThan(0);
    expect(counts.byType['local ?']).toBeUndefined();
  });
});
