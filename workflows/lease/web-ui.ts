/** The lease workflow's text in the Temporal Web UI: the summary fixed at start and the current details. */
import type { Lease } from '../../src/domain/lease';
import { markdownText } from '../../src/domain/markdown';

/** The Web UI's summary, fixed at start (≤ 200 bytes). */
export function staticSummary(lease: Pick<Lease, 'name' | 'projectId' | 'startMs' | 'endMs'>): string {
  const name = lease.name.length > 60 ? `${lease.name.slice(0, 57)}...` : lease.name;
  return `lease ${markdownText(name)} · project ${markdownText(lease.projectId.slice(0, 40))} · ${utc(lease.startMs)} → ${utc(lease.endMs)}`;
}

/** The Web UI's current details: status, reason and the events table. */
export function describe(lease: Lease): string {
  const rows = lease.events.map((e) => `| ${e.event_type} | ${utc(e.time)} | ${e.status} |`);
  const missing = lease.reservations.filter((r) => r.missing_resources).length;
  const moved = lease.reservations.filter((r) => r.resources_changed).length;
  const degraded = missing || moved ? [`degraded: ${[missing ? `${missing} reservation(s) missing failed hosts` : '', moved ? `${moved} moved off failed hosts` : ''].filter(Boolean).join(', ')}`] : [];
  return [
    `**${lease.status}**${lease.statusReason ? ` — ${markdownText(lease.statusReason)}` : ''}`,
    `lease ${markdownText(lease.name)} · ${lease.reservations.length} reservation(s) · version ${lease.version}`,
    ...degraded,
    '',
    '| event | due | status |',
    '| --- | --- | --- |',
    ...rows,
  ].join('\n');
}

export function describeStartStep(lease: Lease, reservationId: string, index: number, count: number, step: string): string {
  return `${describe(lease)}\n\nStarting reservation ${reservationId}: step ${index + 1} of ${count}, ${step}`;
}

export function describeWaitingForPredecessors(waiting: string[]): string {
  return `**STARTING** · waiting for ${waiting.length} earlier lease(s) on the same resources to end: ${waiting.join(', ')}`;
}

export function describeWaitingForEnd(lease: Lease, waitingFor: string): string {
  return `${describe(lease)}\n\nWaiting: ${waitingFor}`;
}

export function describeDeleted(atMs: number): string {
  return `**DELETED** at ${utc(atMs)}`;
}

function utc(ms: number): string {
  return `${new Date(ms).toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}
