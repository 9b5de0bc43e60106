/**
 * The approval rules, pure (src/domain/approval.ts): each condition at its limit (no approval) and
 * one step past it (approval, with the rule's timeout and what the timeout decides); the first
 * rule met wins; a lease already waiting keeps its first deadline.
 */
import { approvalRuleNeed, awaitingApproval, type ApprovalPolicy } from '../src/domain/approval';
import { newLease, type Lease } from '../src/domain/lease';
import { parsePropertyQuery } from '../src/domain/property-query';

const HOUR = 3_600_000;
const T0 = Date.UTC(2030, 0, 1);

function lease(fields: { hosts?: number; slots?: number; hours?: number; hostIds?: string[] } = {}): Lease {
  const reservations = [
    ...(fields.hosts !== undefined ? [{ id: 'h', resource_type: 'physical:host', params: { min: fields.hosts, max: fields.hosts } }] : []),
    ...(fields.slots !== undefined ? [{ id: 's', resource_type: 'virtual:instance', params: { amount: fields.slots, vcpus: 1 } }] : []),
  ];
  const draft = newLease({ id: '00000000-0000-4000-8000-000000000001', name: 'l', projectId: 'p', userId: 'u', start: T0, end: T0 + (fields.hours ?? 1) * HOUR, reservations, requestedMs: T0 - HOUR });
  // As booked: the host reservation's footprint and hosts.
  return { ...draft, reservations: draft.reservations.map((r) => (r.resource_type === 'physical:host' ? { ...r, footprint: { hosts: fields.hosts }, allocation: { host_ids: fields.hostIds ?? [] } } : r)) };
}
const policy = (rules: ApprovalPolicy['rules']): ApprovalPolicy => ({ rules, exceptionTimeoutMs: 60 * 60_000 });

describe('approval rules', () => {
  it.each([
    ['hosts_over', { hostsOver: 2 }, { hosts: 2 }, { hosts: 3 }],
    ['slots_over', { slotsOver: 4 }, { slots: 4 }, { slots: 5 }],
    ['duration_over', { durationOverMs: 24 * HOUR }, { hours: 24 }, { hours: 25 }],
  ] as const)('%s: at the limit no approval, one step past it approval', (name, condition, atLimit, past) => {
    const rules = policy([{ ...condition, timeoutMs: 5 * 60_000, onTimeout: 'approve' }]);
    expect(approvalRuleNeed(rules, lease(atLimit))).toBeUndefined();
    expect(approvalRuleNeed(rules, lease(past))).toMatchObject({ kind: 'rule', rule: `approval.${name}`, timeoutMs: 5 * 60_000, onTimeout: 'approve' });
  });

  it('host_properties: only a lease that booked a host of the class; always: every lease; the first rule met decides', () => {
    const gpu = policy([{ hostProperties: parsePropertyQuery('["==", "$gpu", "a100"]'), timeoutMs: 60_000, onTimeout: 'deny' }, { always: true, timeoutMs: 120_000, onTimeout: 'approve' }]);
    expect(approvalRuleNeed(gpu, lease({ hosts: 1 }), [{ gpu: 'a100' }])).toMatchObject({ rule: 'approval.host_properties', timeoutMs: 60_000 });
    expect(approvalRuleNeed(gpu, lease({ hosts: 1 }), [{ gpu: 'h100' }])).toMatchObject({ rule: 'approval.always', timeoutMs: 120_000 });
    expect(approvalRuleNeed(policy([]), lease({ hosts: 9 }))).toBeUndefined();
  });

  it('stamps a lease not started as waiting, with its deadline; a lease already waiting keeps the first one', () => {
    const need = { kind: 'rule' as const, rule: 'approval.always', reason: 'r', timeoutMs: 60_000, onTimeout: 'deny' as const };
    const waiting = awaitingApproval(lease(), need, T0 - HOUR);
    expect(waiting).toMatchObject({ status: 'PENDING_APPROVAL', approval: { requestedMs: T0 - HOUR, deadlineMs: T0 - HOUR + 60_000 } });
    expect(awaitingApproval(waiting, { ...need, timeoutMs: 1 }, T0).approval!.deadlineMs).toBe(T0 - HOUR + 60_000);
    expect(awaitingApproval({ ...lease(), status: 'ACTIVE' }, need, T0).status).toBe('ACTIVE');
    expect(awaitingApproval(lease(), undefined, T0).status).toBe('PENDING');
  });
});
