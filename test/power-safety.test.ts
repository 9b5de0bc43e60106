/**
 * The power steps' safety (issue 48, the review's fixes), on a migrated database with the in-memory
 * Nova and real drivers: the `command` driver with small programs whose chassis is a file (and
 * which can hang until released, fail, or ignore "on"), and an ipmi_sim BMC for refused credentials.
 * - a power-off is claimed under the lock against new bookings: a booking not yet committed keeps
 *   the host on; a host being powered off counts as asleep for admission and the monitor;
 * - a power-off that fails enables the compute service again; each settle enables every host on
 *   and up that the planner disabled (woken by hand, or late);
 * - one boot deadline per wake, stored, read by the settle and the monitor (whatever the BMC says);
 * - servers still on a host keep it on;
 * - refused credentials back off (power_error), cleared by a success or new settings;
 * - hosts of unknown power are read; a wake of a host already on records no boot;
 * - a lease's start wakes its hosts not on (after a power-off under way), and waits for a boot at
 *   most START_BOOT_WAIT_MS from its wake.
 * No fixed sleeps: each step waits on the database or the programs' files.
 */
import { randomUUID } from 'node:crypto';
import { useMigratedTestDatabase } from '../dev-stack/db';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { eventually } from '../dev-stack/stack';
import { hostPowerOf, recordPowerState, recordReadPowerState, recordWake, saveHostPowerSettings, sleepingHostIds } from '../src/db/host-power';
import { START_BOOT_WAIT_MS } from '../src/config';
import { listHosts, monitoredHosts } from '../src/db/hosts';
import { insertWindow } from '../src/db/maintenance';
import type { HostPowerSettings } from '../src/domain/host-power';
import type { NovaClient } from '../src/openstack/nova';
import type { IronicClient } from '../src/openstack/ironic';
import { PowerAuthError, PowerFailedError } from '../src/power';
import { physicalHostWatch } from '../src/resources/physical-host/health';
import { HostPower, hostsBooting, POWERED_OFF_REASON, untilBooted } from '../src/resources/physical-host/power';
import { FakeNova } from './support/fake-nova';
import { startSimulatedBmc, type SimulatedBmc } from './support/ipmi-sim';
import { testChassis } from './support/power-programs';

const HOUR_MS = 3_600_000;
const SETTINGS = { offAfterIdleMs: HOUR_MS, marginMs: 60_000, recheckMs: HOUR_MS };
const BOOT_MS = 120_000;
const RESUME_MS = 60_000;

const COMMAND: HostPowerSettings = { driver: 'command', address: null, port: null, username: null, password: null, node: null, manage: true, bootSeconds: null };

describe('the power steps’ safety', () => {
  const db = useMigratedTestDatabase();
  const chassis = testChassis();
  const nova = new FakeNova();
  let bmc: SimulatedBmc | undefined;
  const power = (withNova = true) =>
    new HostPower(db().pool, {
      drivers: {
        timeoutMs: 30_000,
        commands: chassis.commands,
        ipmiCipherSuite: 3,
        ironic: (): IronicClient => {
          throw new Error('no Ironic in this test');
        },
      },
      defaultBootMs: BOOT_MS,
      resumeTimeoutMs: RESUME_MS,
      ...(withNova ? { nova: () => nova as unknown as NovaClient } : {}),
    });
  const service = (name: string) => nova.services.find((s) => s.host === name)!;
  /** A host with the command driver, its chassis on (recorded on), its compute service enabled and up. */
  const poweredHost = async (name: string, state: 'on' | 'off' = 'on') => {
    const id = await insertHost(db().pool, { name });
    await saveHostPowerSettings(db().pool, id, COMMAND);
    chassis.set(name, state);
    await recordPowerState(db().pool, id, state, Date.now());
    nova.service(name);
    return id;
  };
  /** Books the host from `inMs` for an hour (as admission does: a host_allocations row), on `client` when given (not committed). */
  const book = (client: { query: (sql: string, values: unknown[]) => Promise<unknown> }, hostId: string, inMs: number) =>
    client.query(
      `INSERT INTO host_allocations (host_id, reservation_id, lease_id, project_id, during, blocks, booking_key)
       VALUES ($1, $2, $3, 'project-a', tstzrange(to_timestamp($4 / 1000.0), to_timestamp($5 / 1000.0)), tstzrange(to_timestamp($4 / 1000.0), to_timestamp($5 / 1000.0)), 'key')`,
      [hostId, randomUUID(), randomUUID(), Date.now() + inMs, Date.now() + inMs + HOUR_MS],
    );
  const expectedDown = async (hostId: string) => (await monitoredHosts(db().pool)).find((h) => h.id === hostId)!.power_down_expected;

  beforeAll(async () => {
    nova.serviceState = () => 'up';
    bmc = await startSimulatedBmc({ power: 'on' });
  });
  afterAll(async () => {
    await bmc?.stop();
    chassis.remove();
  });

  describe('a power-off and a booking at the same time', () => {
    it('keeps the host on for a booking inserted before the claim and committed after it', async () => {
      const hostId = await poweredHost('race-booked');
      const client = await db().pool.connect();
      try {
        await client.query('BEGIN');
        await book(client, hostId, 10 * 60_000);
        const sleeping = power().putToSleep(hostId, Date.now(), SETTINGS);
        // The claim waits for the booking's transaction: its lock on the host's row is what it waits on.
        const waiting = async () => ((await db().pool.query("SELECT 1 FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%FROM hosts WHERE id%FOR UPDATE%'")).rowCount ? true : undefined);
        const first = await Promise.race([sleeping.then(() => 'done' as const), eventually(waiting, 20_000).then(() => 'waiting' as const, () => 'never waited' as const)]);
        expect(first).toBe('waiting');
        await client.query('COMMIT');
        expect(await sleeping).toEqual({ state: 'kept', reason: expect.stringMatching(/^it is needed from /) });
      } finally {
        client.release();
      }
      expect(chassis.power('race-booked')).toBe('on');
      expect(service('race-booked').status).toBe('enabled');
      expect((await hostPowerOf(db().pool, hostId))?.poweringOffAtMs).toBeNull();
    });

    it('counts a host being powered off as asleep for admission, and as down on purpose for the monitor', async () => {
      const hostId = await poweredHost('race-claimed');
      chassis.flag('race-claimed', 'hang-off');
      const sleeping = power().putToSleep(hostId, Date.now(), SETTINGS);
      // The power-off program hangs: the claim is committed, the host not yet off.
      await eventually(async () => ((await sleepingHostIds(db().pool)).has(hostId) ? true : undefined), 20_000);
      expect(chassis.power('race-claimed')).toBe('on');
      expect(await expectedDown(hostId)).toBe(true);
      // What the planner then sees: not on (woken if a booking made now needs it), not to be powered off twice.
      expect((await power().plannedHosts(Date.now())).find((h) => h.id === hostId)?.power).toBe('unknown');
      chassis.flag('race-claimed', 'release');
      expect(await sleeping).toEqual({ state: 'off' });
      expect(chassis.power('race-claimed')).toBe('off');
      expect(await hostPowerOf(db().pool, hostId)).toMatchObject({ powerState: 'off', poweringOffAtMs: null });
    });
  });

  describe('a lease’s start', () => {
    it('wakes its hosts not on, itself, after a power-off under way is done; hosts on or without a driver are left alone', async () => {
      const sleeping = await poweredHost('start-sleeping', 'off');
      const awake = await poweredHost('start-awake');
      const unpowered = await insertHost(db().pool, { name: 'start-unpowered' });
      const claimed = await poweredHost('start-claimed');
      chassis.flag('start-claimed', 'hang-off');
      const poweringOff = power().putToSleep(claimed, Date.now(), SETTINGS);
      await eventually(async () => ((await sleepingHostIds(db().pool)).has(claimed) ? true : undefined), 20_000);
      const waking = power().wakeForStart([sleeping, awake, unpowered, claimed], { pollMs: 50 });
      // The sleeping host is woken at once; the start then waits for the power-off under way (its program hangs) before waking that host.
      await eventually(() => Promise.resolve(chassis.power('start-sleeping') === 'on' ? true : undefined), 20_000);
      expect(chassis.power('start-claimed')).toBe('on');
      chassis.flag('start-claimed', 'release');
      expect(await poweringOff).toEqual({ state: 'off' });
      expect(await waking).toEqual([sleeping, claimed]);
      expect(chassis.power('start-claimed')).toBe('on');
      for (const hostId of [sleeping, claimed]) {
        const record = (await hostPowerOf(db().pool, hostId))!;
        expect(record).toMatchObject({ powerState: 'on', poweringOffAtMs: null });
        expect(record.wake!.bootDeadlineMs - record.wake!.requestedAtMs).toBeCloseTo(BOOT_MS + RESUME_MS, 0);
      }
      expect((await hostPowerOf(db().pool, awake))!.wake).toBeNull();
      expect(await hostPowerOf(db().pool, unpowered)).toBeUndefined();
      // Again (a start tried again): nothing more.
      expect(await power().wakeForStart([sleeping, awake, unpowered, claimed])).toEqual([]);
    });

    it('says which hosts it will wake before it does, and by when they should be up', async () => {
      const sleeping = await poweredHost('ahead-sleeping', 'off');
      const awake = await poweredHost('ahead-awake');
      const nowMs = Date.now();
      expect(await power().wakesAhead([sleeping, awake], nowMs)).toEqual([{ hostId: sleeping, bootDeadlineMs: nowMs + BOOT_MS + RESUME_MS }]);
    });

    it('waits for a boot at most START_BOOT_WAIT_MS from its wake, even with the boot deadline further', async () => {
      const hostId = await poweredHost('slow-boot', 'off');
      const hosts = [{ id: hostId, host: 'slow-boot' }];
      // Woken 26 minutes ago by a start tried since; its deadline (a long boot) 10 minutes ahead; never up (no Nova here).
      await recordWake(db().pool, hostId, Date.now() - 26 * 60_000, Date.now() + 10 * 60_000);
      expect(await hostsBooting(db().pool, hosts, Date.now())).toEqual([expect.objectContaining({ host: 'slow-boot' })]);
      expect(await hostsBooting(db().pool, hosts, Date.now(), undefined, START_BOOT_WAIT_MS)).toEqual([]);
      await untilBooted(db().pool, hosts, { waitAtMostMs: START_BOOT_WAIT_MS });
      // Woken a minute ago: waited for, until it is seen up.
      await recordWake(db().pool, hostId, Date.now() - 60_000, Date.now() + 10 * 60_000);
      expect(await hostsBooting(db().pool, hosts, Date.now(), undefined, START_BOOT_WAIT_MS)).toEqual([expect.objectContaining({ host: 'slow-boot' })]);
    });
  });

  it('enables the compute service again when the power-off fails, and throws the power-off’s error', async () => {
    const hostId = await poweredHost('off-fails');
    chassis.flag('off-fails', 'fail');
    await expect(power().putToSleep(hostId, Date.now(), SETTINGS)).rejects.toBeInstanceOf(PowerFailedError);
    expect(nova.serviceChanges.filter((c) => c.startsWith('off-fails'))).toEqual([`off-fails disabled: ${POWERED_OFF_REASON}, idle until no booking`, 'off-fails enabled']);
    expect(service('off-fails').status).toBe('enabled');
    expect(chassis.power('off-fails')).toBe('on');
    const record = await hostPowerOf(db().pool, hostId);
    expect(record).toMatchObject({ powerState: 'on', poweringOffAtMs: null, error: { message: expect.stringMatching(/^PowerFailedError: .*refused by the test/), count: 1, retryAtMs: null } });
    expect((await sleepingHostIds(db().pool)).has(hostId)).toBe(false);
  });

  it('keeps a host on while Nova lists servers on it', async () => {
    const hostId = await poweredHost('has-servers');
    nova.servers.push({ id: 'server-left', name: 'left', host: 'has-servers', project: 'project-a' });
    expect(await power().putToSleep(hostId, Date.now(), SETTINGS)).toEqual({ state: 'kept', reason: expect.stringMatching(/Nova lists 1 server\(s\) on it \(server-left\)/) });
    expect(chassis.power('has-servers')).toBe('on');
    expect(service('has-servers').status).toBe('enabled');
    expect((await hostPowerOf(db().pool, hostId))?.poweringOffAtMs).toBeNull();
  });

  describe('wakes', () => {
    it('enables a host woken by hand once it is up, and records its boot', async () => {
      const hostId = await poweredHost('by-hand');
      expect(await power().putToSleep(hostId, Date.now(), SETTINGS)).toEqual({ state: 'off' });
      expect(service('by-hand')).toMatchObject({ status: 'disabled' });
      // The API's HostPower has no Nova: the wake by hand touches no compute service.
      const [host] = await listHosts(db().pool, { id: hostId });
      const woken = Date.now();
      await power(false).powerByHand(host, 'on', Date.now());
      const wake = (await hostPowerOf(db().pool, hostId))!.wake!;
      // One deadline per wake: its time, the boot time and the resume time-out.
      expect(wake.requestedAtMs).toBeGreaterThanOrEqual(woken - 1000);
      expect(wake.bootDeadlineMs - wake.requestedAtMs).toBe(BOOT_MS + RESUME_MS);
      const settled = await power().settleWakes(Date.now());
      expect(settled.enabled).toContain(hostId);
      expect(service('by-hand').status).toBe('enabled');
      expect((await hostPowerOf(db().pool, hostId))?.wake).toBeNull();
      expect((await db().pool.query('SELECT 1 FROM host_boots WHERE host_id = $1', [hostId])).rowCount).toBe(1);
    });

    it('fails a host whose BMC takes the wake and never powers on once its deadline passed, and enables it when it comes up late', async () => {
      const hostId = await poweredHost('never-on');
      expect(await power().putToSleep(hostId, Date.now(), SETTINGS)).toEqual({ state: 'off' });
      chassis.flag('never-on', 'ignore-on');
      nova.serviceState = (host) => (host === 'never-on' ? 'down' : 'up');
      expect(await power().wake(hostId)).toBe('woken');
      expect(chassis.power('never-on')).toBe('off');
      expect(await expectedDown(hostId)).toBe(true);
      expect((await power().settleWakes(Date.now())).booting).toEqual([hostId]);
      // Past the deadline: the monitor and the settle both say so, and a read of the BMC (off) changes nothing.
      await db().pool.query("UPDATE host_power SET boot_deadline_at = now() - interval '1 second' WHERE host_id = $1", [hostId]);
      await recordReadPowerState(db().pool, hostId, 'off', Date.now());
      expect(await expectedDown(hostId)).toBe(false);
      expect((await power().settleWakes(Date.now())).givenUp).toEqual([hostId]);
      expect(service('never-on').status).toBe('disabled');
      // It comes up late after all: enabled, no longer awaited.
      nova.serviceState = () => 'up';
      expect((await power().settleWakes(Date.now())).enabled).toContain(hostId);
      expect(service('never-on').status).toBe('enabled');
      expect((await hostPowerOf(db().pool, hostId))?.wake).toBeNull();
    });

    it('reads the power of hosts it does not know, and records no boot for a wake of a host already on', async () => {
      const hostId = await poweredHost('unknown-on');
      await db().pool.query("UPDATE host_power SET power_state = 'unknown', power_state_at = NULL WHERE host_id = $1", [hostId]);
      expect((await power().plan(Date.now(), SETTINGS)).readState).toContain(hostId);
      expect(await power().readState(hostId)).toBe('on');
      expect((await hostPowerOf(db().pool, hostId))?.powerState).toBe('on');
      expect((await power().plan(Date.now(), SETTINGS)).readState).not.toContain(hostId);
      // Recorded off, found on by the wake: nothing to boot, nothing awaited or learned.
      await recordPowerState(db().pool, hostId, 'off', Date.now());
      expect(await power().wake(hostId)).toBe('already-on');
      expect(await hostPowerOf(db().pool, hostId)).toMatchObject({ powerState: 'on', wake: null });
      await power().settleWakes(Date.now());
      expect((await db().pool.query('SELECT 1 FROM host_boots WHERE host_id = $1', [hostId])).rowCount).toBe(0);
    });
  });

  it('backs off a host whose BMC refuses the credentials, shows why, and tries afresh after new settings or a success', async () => {
    const hostId = await insertHost(db().pool, { name: 'refused' });
    nova.service('refused');
    const ipmi = (password: string): HostPowerSettings => ({ ...COMMAND, driver: 'ipmi', address: bmc!.address, port: bmc!.port, username: bmc!.username, password });
    await saveHostPowerSettings(db().pool, hostId, ipmi('not-the-password'));
    await recordPowerState(db().pool, hostId, 'on', Date.now());
    const before = Date.now();
    await expect(power().putToSleep(hostId, Date.now(), SETTINGS)).rejects.toBeInstanceOf(PowerAuthError);
    const first = (await hostPowerOf(db().pool, hostId))!.error!;
    expect(first).toMatchObject({ message: expect.stringMatching(/^PowerAuthError: .*refused user/), count: 1 });
    expect(first.retryAtMs! - first.atMs).toBe(60_000);
    expect(first.atMs).toBeGreaterThanOrEqual(before);
    // Compensated: its service enabled again.
    expect(service('refused').status).toBe('enabled');
    // The plan leaves it until its next try, and looks again then.
    const plan = await power().plan(Date.now(), SETTINGS);
    expect(plan.powerOff).not.toContain(hostId);
    expect(plan.nextLookMs).toBeLessThanOrEqual(first.retryAtMs!);
    // Refused again: the wait doubles.
    await expect(power().putToSleep(hostId, Date.now(), SETTINGS)).rejects.toBeInstanceOf(PowerAuthError);
    const second = (await hostPowerOf(db().pool, hostId))!.error!;
    expect(second.count).toBe(2);
    expect(second.retryAtMs! - second.atMs).toBe(120_000);
    const [host] = await listHosts(db().pool, { id: hostId });
    expect((await power().status(host, Date.now())).power_error).toEqual({ message: second.message, at: second.atMs, failures: 2, next_try: second.retryAtMs });
    // New settings: tried afresh.
    await saveHostPowerSettings(db().pool, hostId, ipmi(bmc!.password));
    expect((await hostPowerOf(db().pool, hostId))?.error).toBeNull();
    expect((await power().plan(Date.now(), SETTINGS)).powerOff).toContain(hostId);
    // A failure, then a success, clears it.
    await saveHostPowerSettings(db().pool, hostId, ipmi('not-the-password'));
    await expect(power().readState(hostId)).rejects.toBeInstanceOf(PowerAuthError);
    await db().pool.query('UPDATE host_power SET password = $2 WHERE host_id = $1', [hostId, bmc!.password]);
    expect(await power().readState(hostId)).toBe('on');
    expect((await hostPowerOf(db().pool, hostId))?.error).toBeNull();
  });

  it('lets a maintenance window take over a compute service the planner disabled, and enable it at its end', async () => {
    const hostId = await poweredHost('maintained');
    await nova.updateService(service('maintained').id, { status: 'disabled', disabled_reason: `${POWERED_OFF_REASON}, idle until no booking` });
    const windowId = randomUUID();
    await insertWindow(db().pool, { id: windowId, hostId, startMs: Date.now() - 1000, endMs: Date.now() + HOUR_MS, reason: 'firmware', disableCompute: true });
    const watch = physicalHostWatch({ pool: db().pool, source: { nova: () => nova as unknown as NovaClient }, freepool: 'freepool', failed: { name: 'failed', closedProjectId: 'nobody' } });
    expect(await watch.beginMaintenance(windowId)).toMatchObject({ begun: true, computeHost: 'maintained' });
    expect(service('maintained')).toMatchObject({ status: 'disabled', disabled_reason: `leasekeeper maintenance ${windowId}: firmware` });
    await watch.endMaintenance({ windowId, hostId, computeHost: 'maintained' });
    expect(service('maintained').status).toBe('enabled');
  });
});
