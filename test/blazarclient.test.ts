/**
 * The real client, unchanged: Debian's python3-blazarclient (`blazar`) against our API.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { promisify } from 'node:util';
import { apiClient, eventually, useTestStack } from '../dev-stack/stack';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { virtualInstancePlugin } from '../src/resources/virtual-instance';
import { COMPUTE_KIND } from '../src/resources/shared/compute-providers';
import { syncCapacityProviders } from '../src/db/quantity-allocations';
import { insertHost } from '../dev-stack/fixtures/hosts';

const run = promisify(execFile);
const BLAZAR = '/usr/bin/blazar';

/** `YYYY-MM-DD HH:MM` (UTC), `minutes` from now, as the client expects. */
function minutesFromNow(minutes: number): string {
  return new Date(Date.now() + minutes * 60_000).toISOString().slice(0, 16).replace('T', ' ');
}

describe('python3-blazarclient drives the API unchanged', () => {
  beforeAll(() => {
    expect(fs.existsSync(BLAZAR)).toBe(true); // installed by `npm run setup` (python3-blazarclient)
  });
  const stack = useTestStack();
  const blazar = async (...args: string[]): Promise<string> => {
    const { stdout } = await run(BLAZAR, ['--os-auth-type', 'none', '--os-endpoint', `${stack().url}/v1`, ...args], { timeout: 60_000 });
    return stdout;
  };

  it('lease-create, lease-list, lease-show, lease-update --prolong-for, lease-delete', async () => {
    const start = minutesFromNow(2);
    const end = minutesFromNow(4);
    const created = await blazar('lease-create', '--start-date', start, '--end-date', end, 'L1');
    expect(created).toMatch(/Created a new lease:/);
    expect(created).toMatch(/\|\s+name\s+\|\s+L1\s+\|/);
    expect(created).toMatch(/\|\s+status\s+\|\s+PENDING\s+\|/);
    const id = /\|\s+id\s+\|\s+([0-9a-f-]{36})\s+\|/.exec(created)?.[1];
    expect(id).toBeDefined();

    const list = await blazar('lease-list');
    expect(list).toMatch(new RegExp(`\\|\\s+${id}\\s+\\|\\s+L1\\s+\\|\\s+${start.replace(' ', 'T')}:00.000000\\s+\\|\\s+${end.replace(' ', 'T')}:00.000000\\s+\\|`));

    const shown = await blazar('lease-show', 'L1'); // by name: the client lists and matches
    expect(shown).toContain(id);
    expect(shown).toMatch(/start_lease/);

    const updated = await blazar('lease-update', '--prolong-for', '1m', 'L1');
    expect(updated).toMatch(/Updated lease: L1/);
    const newEnd = new Date(Date.parse(`${end.replace(' ', 'T')}:00Z`) + 60_000).toISOString().slice(0, 16);
    expect(await blazar('lease-show', id!)).toMatch(new RegExp(`\\|\\s+end_date\\s+\\|\\s+${newEnd}:00.000000\\s+\\|`));

    const deleted = await blazar('lease-delete', 'L1');
    expect(deleted).toMatch(/Deleted lease: L1/);
    await eventually(async () => (!(await blazar('lease-list')).includes(id!) ? true : undefined), 10_000);
  }, 90_000);

  it('prints our error message for a request the API refuses', async () => {
    const failure = await run(BLAZAR, ['--os-auth-type', 'none', '--os-endpoint', `${stack().url}/v1`, 'lease-create', '--start-date', '2001-01-01 00:00', '--end-date', '2001-01-02 00:00', 'old'], { timeout: 60_000 }).catch((err: { stderr: string; code: number }) => err);
    expect((failure as { code: number }).code).not.toBe(0);
    expect((failure as { stderr: string }).stderr).toContain('Start date must be later than current date');
  }, 60_000);

  it('lease-list and lease-show show a lease waiting for approval as it is', async () => {
    const admin = apiClient(() => stack().url, { 'x-auth-token': 'admin' });
    const member = apiClient(() => stack().url, { 'x-project-id': 'waits', 'x-user-id': 'wanda', 'x-roles': 'member' });
    expect((await admin('PUT', '/v1/projects/waits/policy', { approval: [{ always: true, timeout: 600 }] })).status).toBe(200);
    const { body } = await member('POST', '/v1/leases', { name: 'waiting-one', start_date: minutesFromNow(60), end_date: minutesFromNow(120) });
    expect(body.lease.status).toBe('PENDING_APPROVAL');
    expect(await blazar('lease-list')).toMatch(new RegExp(`\\|\\s+${body.lease.id}\\s+\\|\\s+waiting-one\\s+\\|`));
    const shown = await blazar('lease-show', body.lease.id);
    expect(shown).toMatch(/\|\s+status\s+\|\s+PENDING_APPROVAL\s+\|/);
    expect(shown).toMatch(/\|\s+approval\s+\|\s+\{/);
    expect(shown).toContain('"rule": "approval.always"');
    expect((await member('DELETE', `/v1/leases/${body.lease.id}`)).status).toBe(204);
  }, 60_000);
});

describe('python3-blazarclient makes preemptible host and instance leases', () => {
  const stack = useTestStack(() => ({
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }), virtualInstancePlugin({ pool, settings: { cleaningMs: 0 }, cloud: 'calendar-only' })],
  }));
  const blazar = async (...args: string[]): Promise<string> => {
    const { stdout } = await run(BLAZAR, ['--os-auth-type', 'none', '--os-endpoint', `${stack().url}/v1`, ...args], { timeout: 60_000 });
    return stdout;
  };
  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'cli-host' });
    await insertHost(stack().db.pool, { name: 'cli-slots', capabilities: { slots: 'yes' } });
    await syncCapacityProviders(stack().db.pool, COMPUTE_KIND, [{ uuid: 'uuid-cli-slots', name: 'cli-slots', host: 'cli-slots', capacity: { VCPU: 8, MEMORY_MB: 16_384, DISK_GB: 100 }, traits: [] }]);
  });

  it('lease-create --reservation resource_type=physical:host:preemptible makes a preemptible host reservation (the client drops a preemptible key)', async () => {
    const created = await blazar('lease-create', '--reservation', 'resource_type=physical:host:preemptible,min=1,max=1', '--start-date', minutesFromNow(600), '--end-date', minutesFromNow(660), 'P1');
    expect(created).toMatch(/Created a new lease:/);
    const id = /\|\s+id\s+\|\s+([0-9a-f-]{36})\s+\|/.exec(created)?.[1];
    const lease = (await apiClient(() => stack().url, { 'x-auth-token': 'admin' })('GET', `/v1/leases/${id}`)).body.lease;
    expect(lease.reservations).toEqual([expect.objectContaining({ resource_type: 'physical:host', preemptible: true, min: 1, max: 1 })]);
    expect(await blazar('lease-delete', 'P1')).toMatch(/Deleted lease: P1/);
  }, 90_000);

  it('lease-create --reservation resource_type=virtual:instance:preemptible makes a preemptible instance reservation (the client cannot send a preemptible key)', async () => {
    const created = await blazar('lease-create', '--reservation', 'resource_type=virtual:instance:preemptible,vcpus=1,memory_mb=512,disk_gb=1,amount=2', '--start-date', minutesFromNow(600), '--end-date', minutesFromNow(660), 'P2');
    expect(created).toMatch(/Created a new lease:/);
    const id = /\|\s+id\s+\|\s+([0-9a-f-]{36})\s+\|/.exec(created)?.[1];
    const lease = (await apiClient(() => stack().url, { 'x-auth-token': 'admin' })('GET', `/v1/leases/${id}`)).body.lease;
    expect(lease.reservations).toEqual([expect.objectContaining({ resource_type: 'virtual:instance', preemptible: true, amount: 2, hosts: ['cli-slots'] })]);
    expect(await blazar('lease-delete', 'P2')).toMatch(/Deleted lease: P2/);
  }, 90_000);
});
