/** What drift repair plans (src/resources/physical-host/drift.ts): only settled hosts, in our aggregates, against the calendar. */
import type { CurrentBooking } from '../src/db/host-allocations';
import type { MonitoredHost } from '../src/db/hosts';
import type { Aggregate } from '../src/openstack';
import { planDrift, type DriftInput } from '../src/resources/physical-host/drift';

const host = (id: string, state: 'up' | 'failed' = 'up', inMaintenance = false): MonitoredHost => ({
  id, hypervisor_hostname: `node-${id}`, service_name: `node-${id}`, state, in_maintenance: inMaintenance, compute_disabled_for_maintenance: false, power_down_expected: false,
});
const aggregate = (id: number, name: string, hosts: string[], metadata: Record<string, string> = {}): Aggregate => ({ id, name, hosts, metadata }) as unknown as Aggregate;
const leaseAggregate = (id: number, reservation: string, lease: string, hosts: string[]) => aggregate(id, reservation, hosts, { 'leasekeeper:reservation': reservation, 'leasekeeper:lease': lease });
const booking = (hostId: string, status: string, fields: Partial<CurrentBooking> = {}): CurrentBooking => ({
  host_id: hostId, reservation_id: 'r1', lease_id: 'l1', shared: false, lease_status: status, project_id: 'p', aggregate: 'r1', availability_zone: 'blazar_r1', lent: null, ...fields,
});
const LEASES = new Map([['l1', { status: 'ACTIVE', deleted: false }], ['l2', { status: 'TERMINATED', deleted: false }], ['l3', { status: 'TERMINATING', deleted: false }], ['l4', { status: 'PENDING', deleted: true }], ['l5', { status: 'ACTIVE', deleted: false }]]);

function plan(fields: Partial<DriftInput>) {
  return planDrift({ hosts: [], bookings: [], aggregates: [], leases: LEASES, freepool: 'pool', failed: 'failed', ...fields });
}

describe('drift plan', () => {
  it('wants an idle host in the pool and an active lease\'s host in its aggregate, and nothing where they already are', () => {
    const settled = plan({ hosts: [host('1'), host('2')], bookings: [booking('2', 'ACTIVE')], aggregates: [aggregate(1, 'pool', ['node-1']), leaseAggregate(2, 'r1', 'l1', ['node-2'])] });
    expect(settled.drifts).toEqual([]);
    const moved = plan({ hosts: [host('1'), host('2')], bookings: [booking('2', 'ACTIVE')], aggregates: [aggregate(1, 'pool', ['node-2']), leaseAggregate(2, 'r1', 'l1', ['node-1'])] });
    expect(moved.drifts.map((d) => [d.host, d.found, d.target.name, d.key])).toEqual([
      ['node-1', ['r1'], 'pool', 'r1>pool'],
      ['node-2', ['pool'], 'r1', 'pool>r1'],
    ]);
    expect(moved.drifts[1].target.leaseAggregate).toEqual({ reservationId: 'r1', leaseId: 'l1', projectId: 'p', availabilityZone: 'blazar_r1' });
  });

  it('finds a host in no aggregate, and one in two', () => {
    const { drifts } = plan({ hosts: [host('1'), host('2')], aggregates: [aggregate(1, 'pool', ['node-2']), aggregate(3, 'failed', ['node-2'])] });
    expect(drifts.map((d) => d.key)).toEqual(['none>pool', 'failed+pool>pool']);
  });

  it('leaves alone hosts in flight: bookings of leases not ACTIVE, instance slots, and aggregates of unsettled leases', () => {
    const { drifts } = plan({
      hosts: [host('1'), host('2'), host('3')],
      bookings: [booking('1', 'STARTING'), booking('2', 'ACTIVE', { shared: true })],
      aggregates: [aggregate(1, 'pool', []), leaseAggregate(4, 'r3', 'l3', ['node-3'])],
    });
    expect(drifts).toEqual([]);
  });

  it('lets a failed host wait in the failed aggregate, and ignores aggregates of leases it does not know', () => {
    const { drifts } = plan({ hosts: [host('1', 'failed'), host('2')], aggregates: [aggregate(1, 'pool', ['node-2']), aggregate(3, 'failed', ['node-1']), leaseAggregate(5, 'rx', 'unknown-lease', ['node-2'])] });
    expect(drifts).toEqual([]);
  });

  it('lets a host in maintenance wait in the failed aggregate, and takes it back once the window is over', () => {
    const aside = [aggregate(1, 'pool', []), aggregate(3, 'failed', ['node-1'])];
    expect(plan({ hosts: [host('1', 'up', true)], aggregates: aside }).drifts).toEqual([]);
    expect(plan({ hosts: [host('1', 'up', false)], aggregates: aside }).drifts.map((d) => d.key)).toEqual(['failed>pool']);
  });

  describe('a host its lease lends (issue 43)', () => {
    // l1 (project p, aggregate r1) lends node-1; l5 (project q, aggregate r5) may borrow it.
    const lender = (lent: CurrentBooking['lent']) => booking('1', 'ACTIVE', { lent });
    const borrower = (status = 'ACTIVE') => booking('1', status, { reservation_id: 'r5', lease_id: 'l5', project_id: 'q', aggregate: 'r5', availability_zone: 'blazar_r5' });
    const aggregates = (pool: string[], lenders: string[], borrowers: string[]) => [aggregate(1, 'pool', pool), leaseAggregate(2, 'r1', 'l1', lenders), leaseAggregate(5, 'r5', 'l5', borrowers)];

    it('is left in its borrower\'s aggregate, or in the pool while nobody borrows it', () => {
      expect(plan({ hosts: [host('1')], bookings: [lender('now'), borrower()], aggregates: aggregates([], [], ['node-1']) }).drifts).toEqual([]);
      expect(plan({ hosts: [host('1')], bookings: [borrower(), lender('now')], aggregates: aggregates([], [], ['node-1']) }).drifts).toEqual([]);
      expect(plan({ hosts: [host('1')], bookings: [lender('now')], aggregates: aggregates(['node-1'], [], []) }).drifts).toEqual([]);
    });

    it('is put back where its lending says, never into its lender\'s aggregate', () => {
      const intoLender = plan({ hosts: [host('1')], bookings: [lender('now'), borrower()], aggregates: aggregates([], ['node-1'], []) });
      expect(intoLender.drifts.map((d) => [d.key, d.target.leaseAggregate?.leaseId])).toEqual([['r1>r5', 'l5']]);
      const unborrowed = plan({ hosts: [host('1')], bookings: [lender('now')], aggregates: aggregates([], ['node-1'], []) });
      expect(unborrowed.drifts.map((d) => d.key)).toEqual(['r1>pool']);
    });

    it('is left alone while its borrower starts or ends, and once its lending ended until it is back', () => {
      expect(plan({ hosts: [host('1')], bookings: [lender('now'), borrower('STARTING')], aggregates: aggregates(['node-1'], [], []) }).drifts).toEqual([]);
      // Taken back: already in the lender's aggregate, or still in the borrower's or the pool.
      for (const where of [aggregates([], ['node-1'], []), aggregates([], [], ['node-1']), aggregates(['node-1'], [], [])]) {
        expect(plan({ hosts: [host('1')], bookings: [lender('returning')], aggregates: where }).drifts).toEqual([]);
      }
    });
  });

  it('names the aggregates of ended or deleted leases as stale, and takes their hosts back to the pool', () => {
    const result = plan({ hosts: [host('1')], aggregates: [aggregate(1, 'pool', []), leaseAggregate(6, 'r2', 'l2', ['node-1']), leaseAggregate(7, 'r4', 'l4', []), leaseAggregate(8, 'r1', 'l1', [])] });
    expect(result.staleAggregates.map((a) => a.name)).toEqual(['r2', 'r4']);
    expect(result.drifts.map((d) => d.key)).toEqual(['r2>pool']);
  });
});
