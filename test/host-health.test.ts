/** The host monitor's rules (src/domain/host-health.ts): grace, flapping, recovery, restart from the recorded state. */
import { assessHosts, failedHostIds, RECOVERED_REASON, type HostHealthMap, type HostObservation } from '../src/domain/host-health';

const GRACE = 30_000;
const T0 = Date.UTC(2026, 10, 25, 9, 0, 0);
const seen = (problem?: string, recorded: 'up' | 'failed' = 'up'): HostObservation[] => [{ hostId: '1', host: 'fake-1', recorded, ...(problem ? { problem } : {}) }];

/** Runs looks at the given offsets (ms from T0), each with its problem (undefined: healthy). */
function looks(steps: Array<[number, string | undefined]>, start: HostHealthMap = {}, recorded: 'up' | 'failed' = 'up') {
  let health = start;
  const changes: Array<{ at: number; state: string; sinceMs: number; reason: string }> = [];
  for (const [offset, problem] of steps) {
    const next = assessHosts(health, seen(problem, recorded), T0 + offset, GRACE);
    health = next.health;
    changes.push(...next.changes.map((c) => ({ at: offset, state: c.state, sinceMs: c.sinceMs - T0, reason: c.reason })));
  }
  return { health, changes };
}

describe('host health', () => {
  it('fails a host only once its problem has lasted the grace period, dated from when it was first seen', () => {
    const { health, changes } = looks([[0, 'its compute service is forced down'], [10_000, 'its compute service is forced down'], [29_999, 'its compute service is forced down'], [30_000, 'its compute service is forced down'], [40_000, 'its compute service is down']]);
    expect(changes).toEqual([{ at: 30_000, state: 'failed', sinceMs: 0, reason: 'its compute service is forced down' }]);
    expect(health['1']).toMatchObject({ state: 'failed', sinceMs: T0, reason: 'its compute service is forced down' });
    expect(failedHostIds(health)).toEqual(['1']);
  });

  it('never fails a host that flaps within the grace period, and forgets the suspicion when it is healthy', () => {
    const { health, changes } = looks([[0, 'down'], [20_000, undefined], [25_000, 'down'], [50_000, undefined], [54_000, 'down'], [80_000, 'down']]);
    expect(changes).toEqual([]);
    expect(health['1']).toMatchObject({ state: 'up', suspectSinceMs: T0 + 54_000, suspectReason: 'down' });
    expect(failedHostIds(health)).toEqual([]);
  });

  it('recovers a failed host at the first healthy look, and fails it again only after a new grace period', () => {
    const { changes } = looks([[0, 'down'], [30_000, 'down'], [31_000, undefined], [32_000, 'down'], [61_000, 'down'], [62_000, 'down']]);
    expect(changes).toEqual([
      { at: 30_000, state: 'failed', sinceMs: 0, reason: 'down' },
      { at: 31_000, state: 'up', sinceMs: 31_000, reason: RECOVERED_REASON },
      { at: 62_000, state: 'failed', sinceMs: 32_000, reason: 'down' },
    ]);
  });

  it('fails at once with no grace period', () => {
    expect(assessHosts({}, seen('gone'), T0, 0).changes).toEqual([{ hostId: '1', host: 'fake-1', state: 'failed', sinceMs: T0, reason: 'gone' }]);
  });

  it('carries on from the recorded state after a restart: a failed host is not failed twice, and its recovery is seen', () => {
    const stillFailed = looks([[0, 'down'], [60_000, 'down']], {}, 'failed');
    expect(stillFailed.changes).toEqual([]);
    expect(stillFailed.health['1'].state).toBe('failed');
    expect(looks([[0, undefined]], {}, 'failed').changes).toEqual([{ at: 0, state: 'up', sinceMs: 0, reason: RECOVERED_REASON }]);
  });

  it('forgets hosts that are no longer enrolled', () => {
    const before = assessHosts({}, [...seen('down'), { hostId: '2', host: 'fake-2', recorded: 'up' }], T0, 0).health;
    expect(Object.keys(before).sort()).toEqual(['1', '2']);
    expect(Object.keys(assessHosts(before, [{ hostId: '2', host: 'fake-2', recorded: 'up' }], T0 + 1, 0).health)).toEqual(['2']);
  });
});
