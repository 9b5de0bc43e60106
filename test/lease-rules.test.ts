import { ApplicationFailure } from '@temporalio/common';
import { applyLeaseUpdate, beforeEndTime, bookingStartMs, newLease, type Lease } from '../src/domain/lease';

const MIN = 60_000;
const HOUR = 60 * MIN;
const NOW = Date.UTC(2026, 10, 21, 12, 0, 30);

function lease(overrides: Partial<Parameters<typeof newLease>[0]> = {}): Lease {
  return newLease({ id: 'l1', name: 'rules', projectId: 'p', userId: 'u', start: NOW + HOUR, end: NOW + 5 * HOUR, reservations: [], requestedMs: NOW, ...overrides });
}

function failure(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(ApplicationFailure);
    return `${(err as ApplicationFailure).type}: ${(err as Error).message}`;
  }
  throw new Error('expected a failure');
}

describe("Blazar's lease rules", () => {
  it('puts before_end one hour before the end, clamped to the start, unless given', () => {
    expect(beforeEndTime(lease())).toBe(NOW + 4 * HOUR);
    expect(beforeEndTime(lease({ end: NOW + HOUR + 10 * MIN }))).toBe(NOW + HOUR);
    expect(beforeEndTime(lease({ beforeEnd: NOW + 2 * HOUR }))).toBe(NOW + 2 * HOUR);
    expect(lease().events.map((e) => [e.event_type, e.time - NOW])).toEqual([
      ['start_lease', HOUR],
      ['before_end_lease', 4 * HOUR],
      ['end_lease', 5 * HOUR],
    ]);
  });

  it('takes "now" as the minute of the request, as Blazar, and a start within the current minute as now', () => {
    const now = lease({ start: 'now' });
    expect(now.startMs).toBe(NOW - 30_000); // 12:00, requested at 12:00:30
    expect(now.events.find((e) => e.event_type === 'start_lease')?.time).toBe(NOW - 30_000);
    expect(bookingStartMs(now)).toBe(NOW); // the part of the minute already gone is not booked
    expect(bookingStartMs(lease())).toBe(NOW + HOUR);
    expect(lease({ start: NOW - 30_000 }).startMs).toBe(NOW - 30_000); // 12:00, requested at 12:00:30
    expect(failure(() => lease({ start: NOW - 31_000 }))).toBe('InvalidLease: Start date must be later than current date. start_date must be "now" or a later date.');
  });

  it('moves the start only before the lease starts, and re-times the events', () => {
    const moved = applyLeaseUpdate(lease(), { start: NOW + 2 * HOUR }, NOW);
    expect(moved.events[0].time).toBe(NOW + 2 * HOUR);
    const active = { ...lease(), status: 'ACTIVE' as const };
    expect(failure(() => applyLeaseUpdate(active, { start: NOW + 2 * HOUR }, NOW))).toMatch(/^InvalidLease: Cannot modify the start date of already started leases\. /);
    expect(applyLeaseUpdate(active, { start: active.startMs, name: 'same start is no change' }, NOW).name).toBe('same start is no change');
  });

  it('ends an active lease now, but not a pending one', () => {
    const active = { ...lease(), status: 'ACTIVE' as const, startMs: NOW - HOUR };
    expect(applyLeaseUpdate(active, { end: 'now' }, NOW).endMs).toBe(NOW);
    expect(failure(() => applyLeaseUpdate(lease(), { end: 'now' }, NOW))).toMatch(/ends an active lease early/);
  });

  it('refuses an end in the past or not after the start', () => {
    expect(failure(() => applyLeaseUpdate(lease(), { end: NOW - 2 * MIN }, NOW))).toBe('InvalidLease: End date must be later than current and start date. end_date must be "now" or a later date.');
    expect(failure(() => applyLeaseUpdate(lease(), { end: NOW + HOUR }, NOW))).toBe('InvalidLease: End date must be later than current and start date. end_date must be later than start_date.');
  });

  it('lets an ended lease be renamed only', () => {
    const ended = { ...lease(), status: 'TERMINATED' as const };
    expect(applyLeaseUpdate(ended, { name: 'renamed' }, NOW).name).toBe('renamed');
    expect(failure(() => applyLeaseUpdate(ended, { end: NOW + 9 * HOUR }, NOW))).toBe('InvalidLease: Terminated leases can only be renamed. Lease rules is TERMINATED.');
  });

  it('runs the before-end action again when an extension moves it into the future', () => {
    const active: Lease = { ...lease(), status: 'ACTIVE', startMs: NOW - 2 * HOUR, endMs: NOW + 10 * MIN };
    active.events = active.events.map((e) => (e.event_type === 'before_end_lease' ? { ...e, status: 'DONE', time: NOW - 50 * MIN } : e));
    const extended = applyLeaseUpdate(active, { end: NOW + 3 * HOUR }, NOW);
    expect(extended.events.find((e) => e.event_type === 'before_end_lease')).toMatchObject({ status: 'UNDONE', time: NOW + 2 * HOUR });
  });

  it('drops a user-set before_end that new dates exclude, and refuses one given outside them', () => {
    const withBeforeEnd = lease({ beforeEnd: NOW + 4 * HOUR });
    expect(applyLeaseUpdate(withBeforeEnd, { end: NOW + 3 * HOUR }, NOW).beforeEndMs).toBeUndefined();
    expect(failure(() => applyLeaseUpdate(withBeforeEnd, { beforeEnd: NOW + 6 * HOUR }, NOW))).toBe('InvalidLease: Datetime is out of lease limits. before_end_date must be between start_date and end_date.');
  });
});
