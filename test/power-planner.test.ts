/**
 * The power planner (issue 48) on the test stack, with ipmi_sim BMCs and the in-memory Nova: a host
 * idle past the threshold is powered off (the BMC says off) after its compute service was disabled
 * with the planner's reason; a lease admitted for a start 30 minutes ahead wakes it in time (boot
 * time and margin set so that its wake is due seconds from now): on, its service enabled again,
 * the boot recorded, all before the start; a host whose service an operator disabled is neither
 * powered off nor ever enabled by the planner; a lease starting now on a sleeping host is woken by
 * its start itself (the planner not running) and waits for the boot. No fixed sleeps: each step
 * waits on the BMC, Nova or the database.
 */
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../dev-stack/stack';
import { recordPowerState, sleepingHostIds } from '../src/db/host-power';
import type { NovaClient } from '../src/openstack/nova';
import type { IronicClient } from '../src/openstack/ironic';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { physicalHostWatch } from '../src/resources/physical-host/health';
import { deploymentHostPower, POWERED_OFF_REASON } from '../src/resources/physical-host/power';
import { getPowerPlannerState, planNow, powerPlannerWorkflowId } from '../workflows/power-planner/messages';
import { FakeNova, glance } from './support/fake-nova';
import type { Config } from '../src/config';
import type { Pool } from '../src/db/pool';

/** The deployment's HostPower over the in-memory Nova (no Ironic). */
const hostPowerOver = (nova: FakeNova) => (pool: Pool, config: Config) =>
  deploymentHostPower(pool, config.power, {
    ironic: (): IronicClient => {
      throw new Error('no Ironic in this test');
    },
    nova: () => nova as unknown as NovaClient,
  });
import { startSimulatedBmc, type SimulatedBmc } from './support/ipmi-sim';
import { testChassis } from './support/power-programs';

describe('the power planner', () => {
  const nova = new FakeNova();
  const bmcs: Record<string, SimulatedBmc> = {};
  beforeAll(async () => {
    bmcs['planned-a'] = await startSimulatedBmc({ power: 'on' });
    bmcs['planned-b'] = await startSimulatedBmc({ power: 'on' });
    // A compute service is up while its host's BMC says on.
    nova.serviceState = (host) => (bmcs[host]?.power() === 'on' ? 'up' : 'down');
  });
  afterAll(async () => {
    for (const bmc of Object.values(bmcs)) await bmc.stop();
  });
  const stack = useTestStack(
    {
      // A boot of 2 s woken 1795 s early: a booking 30 minutes ahead is woken for a few seconds from now.
      // The idle threshold is 30 minutes (the margin may not exceed it): a host with no booking sleeps.
      env: { LK_POWER_PLANNER: 'on', LK_POWER_IPMI_CIPHER_SUITE: '3', LK_POWER_BOOT_SECONDS: '2', LK_POWER_WAKE_MARGIN_SECONDS: '1795', LK_POWER_OFF_AFTER_IDLE: '30m', LK_POWER_RECHECK_SECONDS: '3600', LK_API_METRICS_CACHE_SECONDS: '0' },
      config: (config) => ({ ...config, power: { ...config.power, bootPollMs: 300 } }),
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
      hostPower: hostPowerOver(nova),
    },
    { beforeStop: (s) => deleteAllLeases(apiClient(s.url)) },
  );
  const admin = apiClient(() => stack().url);
  const planner = () => stack().temporal.client.workflow.getHandle(powerPlannerWorkflowId(stack().config.temporal.taskQueue));
  const hostIds: Record<string, string> = {};
  const powerState = async (name: string) => (await admin('GET', `/v1/os-hosts/${hostIds[name]}`)).body.host.power_state as string;
  const service = (name: string) => nova.services.find((s) => s.host === name)!;
  /** Tells the planner to look, and waits for a look that began after now. */
  const aLook = async () => {
    const asked = Date.now();
    await planner().signal(planNow);
    await eventually(async () => (((await planner().query(getPowerPlannerState)).lastLookMs ?? 0) >= asked ? true : undefined), 45_000);
  };

  beforeAll(async () => {
    for (const name of ['planned-a', 'planned-b']) {
      hostIds[name] = await insertHost(stack().db.pool, { name, capabilities: { scenario: name } });
      const bmc = bmcs[name];
      const put = await admin('PUT', `/v1/os-hosts/${hostIds[name]}`, { power: { driver: 'ipmi', address: bmc.address, port: bmc.port, username: bmc.username, password: bmc.password } });
      expect(put.status).toBe(200);
      await recordPowerState(stack().db.pool, hostIds[name], 'on', Date.now());
    }
    nova.service('planned-a');
    // An operator's: disabled for a reason of theirs.
    nova.service('planned-b', { status: 'disabled', disabled_reason: 'operator: firmware update' });
  });

  it('powers off a host idle past the threshold, its compute service disabled first with the reason', async () => {
    await planner().signal(planNow);
    await eventually(async () => (bmcs['planned-a'].power() === 'off' && (await powerState('planned-a')) === 'off' ? true : undefined), 45_000);
    expect(service('planned-a')).toMatchObject({ status: 'disabled', disabled_reason: `${POWERED_OFF_REASON}, idle until no booking` });
    // Disabled before the power-off: Nova's first change of it is the disable.
    expect(nova.serviceChanges.filter((c) => c.startsWith('planned-a'))).toEqual([`planned-a disabled: ${POWERED_OFF_REASON}, idle until no booking`]);
    expect((await admin('GET', `/v1/os-hosts/${hostIds['planned-a']}`)).body.host.powered_off_since).toEqual(expect.any(String));
    // /metrics: one host off now, and its hours off counted.
    const metrics = await (await fetch(`${stack().url}/metrics`)).text();
    expect(metrics).toMatch(/^leasekeeper_hosts_powered_off 1$/m);
    expect(Number(/^leasekeeper_host_powered_off_hours_total (\S+)$/m.exec(metrics)?.[1])).toBeGreaterThan(0);
  });

  it('never powers off a host whose compute service an operator disabled', async () => {
    await aLook();
    expect(bmcs['planned-b'].power()).toBe('on');
    expect(service('planned-b')).toMatchObject({ status: 'disabled', disabled_reason: 'operator: firmware update' });
  });

  it('wakes a sleeping host for a lease admitted 30 minutes ahead: on and enabled before its start, the boot recorded', async () => {
    const startMs = Date.now() + 1_800_000;
    const created = await admin('POST', '/v1/leases', { name: 'wakes-a', start_date: inSeconds(1800), end_date: inSeconds(5400), reservations: [hostReservation({ resource_properties: JSON.stringify(['==', '$scenario', 'planned-a']) })] });
    expect(created.status).toBe(201);
    // The API's signal, not the recheck (an hour), brings the look; the wake falls due seconds later.
    await eventually(() => Promise.resolve(service('planned-a').status === 'enabled' ? true : undefined), 45_000);
    expect(bmcs['planned-a'].power()).toBe('on');
    expect(await powerState('planned-a')).toBe('on');
    expect(Date.now()).toBeLessThan(startMs);
    const boots = await stack().db.pool.query<{ boot_ms: number }>(`SELECT (extract(epoch FROM up_at - woken_at) * 1000)::float8 AS boot_ms FROM host_boots WHERE host_id = $1`, [hostIds['planned-a']]);
    expect(boots.rows).toHaveLength(1);
    expect(boots.rows[0].boot_ms).toBeGreaterThanOrEqual(0);
    expect((await planner().query(getPowerPlannerState)).booting).toEqual([]);
  });

  it('wakes a host an operator disabled for its booking, and leaves its service disabled', async () => {
    // Put to sleep by hand (the planner never does it: its service is the operator's).
    expect((await admin('POST', `/v1/os-hosts/${hostIds['planned-b']}/power`, { action: 'off' })).status).toBe(200);
    expect(bmcs['planned-b'].power()).toBe('off');
    const created = await admin('POST', '/v1/leases', { name: 'wakes-b', start_date: inSeconds(1800), end_date: inSeconds(5400), reservations: [hostReservation({ resource_properties: JSON.stringify(['==', '$scenario', 'planned-b']) })] });
    expect(created.status).toBe(201);
    const booted = async () => (await stack().db.pool.query('SELECT 1 FROM host_boots WHERE host_id = $1', [hostIds['planned-b']])).rowCount;
    await eventually(async () => ((await booted()) === 1 ? true : undefined), 45_000);
    expect(bmcs['planned-b'].power()).toBe('on');
    expect(service('planned-b')).toMatchObject({ status: 'disabled', disabled_reason: 'operator: firmware update' });
    expect(nova.serviceChanges.filter((c) => c.startsWith('planned-b'))).toEqual([]);
  });
});

describe('a woken host that does not come up', () => {
  const nova = new FakeNova();
  let bmc: SimulatedBmc | undefined;
  beforeAll(async () => {
    bmc = await startSimulatedBmc({ power: 'off' });
  });
  afterAll(() => bmc?.stop());
  const stack = useTestStack(
    {
      // As above, woken 23 s after its create, for a lease 30 minutes away (room for the blocker's delete before it on a loaded machine); a resume time-out of 1 s: past boot (2 s) and that, the monitor
      // (every 200 ms, no grace) fails the host.
      env: {
        LK_POWER_PLANNER: 'on', LK_POWER_IPMI_CIPHER_SUITE: '3', LK_POWER_BOOT_SECONDS: '2', LK_POWER_WAKE_MARGIN_SECONDS: '1775', LK_POWER_OFF_AFTER_IDLE: '30m', LK_POWER_RECHECK_SECONDS: '3600',
        LK_POWER_RESUME_TIMEOUT_SECONDS: '1', LK_HOST_MONITOR_INTERVAL_SECONDS: '0.2', LK_HOST_FAIL_GRACE_SECONDS: '0',
      },
      config: (config) => ({ ...config, power: { ...config.power, bootPollMs: 300 } }),
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
      hostPower: hostPowerOver(nova),
      hostWatch: (pool) => physicalHostWatch({ pool, source: { nova: () => nova as unknown as NovaClient }, freepool: 'freepool', failed: { name: 'failed', closedProjectId: 'nobody' } }),
    },
    { beforeStop: (s) => deleteAllLeases(apiClient(s.url)) },
  );
  const admin = apiClient(() => stack().url);

  it('is failed by the host monitor once its boot time and the resume time-out have passed, and its lease healed onto another host', async () => {
    // `dead` powers on (its BMC says on) but its compute service never comes up; `spare` is awake and free.
    nova.service('dead');
    nova.service('spare');
    nova.serviceState = (host) => (host === 'spare' ? 'up' : 'down');
    const dead = await insertHost(stack().db.pool, { name: 'dead', capabilities: { scenario: 'heal' } });
    await insertHost(stack().db.pool, { name: 'spare', capabilities: { scenario: 'heal' } });
    expect((await admin('PUT', `/v1/os-hosts/${dead}`, { power: { driver: 'ipmi', address: bmc!.address, port: bmc!.port, username: bmc!.username, password: bmc!.password } })).status).toBe(200);
    await recordPowerState(stack().db.pool, dead, 'off', Date.now());
    // The spare is held by a blocker over the lease's start: the lease gets the sleeping host; the blocker then goes, before the wake.
    const blocker = await admin('POST', '/v1/leases', { name: 'blocker', start_date: 'now', end_date: inSeconds(1900), reservations: [hostReservation({ resource_properties: JSON.stringify(['==', '$scenario', 'heal']) })] });
    expect(blocker.status).toBe(201);
    expect(blocker.body.lease.reservations[0].hosts).toEqual(['spare']);
    const created = await admin('POST', '/v1/leases', { name: 'heals', start_date: inSeconds(1800), end_date: inSeconds(5400), reservations: [hostReservation({ resource_properties: JSON.stringify(['==', '$scenario', 'heal']) })] });
    expect(created.status).toBe(201);
    expect(created.body.lease.reservations[0].hosts).toEqual(['dead']);
    expect((await admin('DELETE', `/v1/leases/${blocker.body.lease.id}`)).status).toBe(204);
    expect(bmc!.power()).toBe('off');
    // Woken (the BMC says on), never up: failed, and the lease moves to the spare (free from the blocker's end).
    await eventually(() => Promise.resolve(bmc!.power() === 'on' ? true : undefined), 45_000);
    await eventually(async () => ((await admin('GET', `/v1/os-hosts/${dead}`)).body.host.state === 'failed' ? true : undefined), 45_000);
    await eventually(async () => ((await admin('GET', `/v1/leases/${created.body.lease.id}`)).body.lease.reservations[0].hosts[0] === 'spare' ? true : undefined), 45_000);
  });
});

describe('a power-off that hangs', () => {
  const nova = new FakeNova();
  const chassis = testChassis();
  afterAll(() => {
    chassis.flag('hangs', 'release');
    chassis.remove();
  });
  const stack = useTestStack(
    {
      // One lane of each kind; the hanging power-off program is killed only after 2 minutes. A boot of 2 s woken 1795 s
      // early: a booking 30 minutes ahead is woken for a few seconds after its admission.
      env: {
        LK_POWER_PLANNER: 'on', LK_POWER_PARALLEL: '1', LK_POWER_TIMEOUT_SECONDS: '120', LK_POWER_BOOT_SECONDS: '2', LK_POWER_WAKE_MARGIN_SECONDS: '1795', LK_POWER_OFF_AFTER_IDLE: '30m', LK_POWER_RECHECK_SECONDS: '3600',
        LK_POWER_COMMAND_ON: JSON.stringify(chassis.commands.on), LK_POWER_COMMAND_OFF: JSON.stringify(chassis.commands.off), LK_POWER_COMMAND_STATUS: JSON.stringify(chassis.commands.status),
      },
      config: (config) => ({ ...config, power: { ...config.power, bootPollMs: 300 } }),
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
      hostPower: hostPowerOver(nova),
    },
    { beforeStop: (s) => deleteAllLeases(apiClient(s.url)) },
  );
  const admin = apiClient(() => stack().url);

  it('delays no wake: a host is woken for its lease while another host’s power-off still hangs', async () => {
    nova.serviceState = (host) => (chassis.power(host) === 'on' ? 'up' : 'down');
    const ids: Record<string, string> = {};
    for (const [name, state] of [['hangs', 'on'], ['sleeps', 'off']] as const) {
      chassis.set(name, state);
      // As the planner leaves a host it put to sleep: its compute service disabled with its reason.
      nova.service(name, state === 'off' ? { status: 'disabled', disabled_reason: `${POWERED_OFF_REASON}, idle until no booking` } : {});
      ids[name] = await insertHost(stack().db.pool, { name, capabilities: { scenario: `lanes-${name}` } });
      expect((await admin('PUT', `/v1/os-hosts/${ids[name]}`, { power: { driver: 'command' } })).status).toBe(200);
      await recordPowerState(stack().db.pool, ids[name], state, Date.now());
    }
    chassis.flag('hangs', 'hang-off');
    await stack().temporal.client.workflow.getHandle(powerPlannerWorkflowId(stack().config.temporal.taskQueue)).signal(planNow);
    // The idle host's power-off is under way (claimed), its program hanging.
    await eventually(async () => ((await sleepingHostIds(stack().db.pool)).has(ids.hangs) ? true : undefined), 45_000);
    const created = await admin('POST', '/v1/leases', { name: 'woken-beside-a-hang', start_date: inSeconds(1800), end_date: inSeconds(5400), reservations: [hostReservation({ resource_properties: JSON.stringify(['==', '$scenario', 'lanes-sleeps']) })] });
    expect(created.status).toBe(201);
    await eventually(() => Promise.resolve(chassis.power('sleeps') === 'on' && service(nova, 'sleeps').status === 'enabled' ? true : undefined), 45_000);
    // Still hanging: the wake did not wait for it.
    expect(chassis.power('hangs')).toBe('on');
    chassis.flag('hangs', 'release');
    await eventually(async () => (chassis.power('hangs') === 'off' && (await admin('GET', `/v1/os-hosts/${ids.hangs}`)).body.host.power_state === 'off' ? true : undefined), 45_000);
  });
});

function service(nova: FakeNova, host: string) {
  return nova.services.find((s) => s.host === host)!;
}

describe('a lease starting on a host still booting', () => {
  const nova = new FakeNova();
  const chassis = testChassis();
  /** Whether the host's compute service has come up (the test says when). */
  let booted = false;
  afterAll(() => chassis.remove());
  const stack = useTestStack(
    {
      // A boot of 60 s, no margin: a lease starting now is woken at once (by its start or the planner, whichever comes first), and its start waits while the host boots.
      // The planner looks at least every 2 s: a wake made by the start between two looks is not signalled to it (left open in issue 48), and the start here (no cloud) learns of the boot from the planner's look.
      env: {
        LK_POWER_PLANNER: 'on', LK_POWER_BOOT_SECONDS: '60', LK_POWER_WAKE_MARGIN_SECONDS: '0', LK_POWER_OFF_AFTER_IDLE: '30m', LK_POWER_RECHECK_SECONDS: '2',
        LK_POWER_COMMAND_ON: JSON.stringify(chassis.commands.on), LK_POWER_COMMAND_OFF: JSON.stringify(chassis.commands.off), LK_POWER_COMMAND_STATUS: JSON.stringify(chassis.commands.status),
      },
      config: (config) => ({ ...config, power: { ...config.power, bootPollMs: 300 } }),
      withPool: (pool, config) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only', power: hostPowerOver(nova)(pool, config) })],
      hostPower: hostPowerOver(nova),
    },
    { beforeStop: (s) => deleteAllLeases(apiClient(s.url)) },
  );
  const admin = apiClient(() => stack().url);

  it('waits for the boot, saying so in status_reason, and starts once the host is up', async () => {
    nova.serviceState = () => (booted ? 'up' : 'down');
    chassis.set('late-boot', 'off');
    nova.service('late-boot', { status: 'disabled', disabled_reason: `${POWERED_OFF_REASON}, idle until no booking` });
    const hostId = await insertHost(stack().db.pool, { name: 'late-boot', capabilities: { scenario: 'late-boot' } });
    expect((await admin('PUT', `/v1/os-hosts/${hostId}`, { power: { driver: 'command' } })).status).toBe(200);
    await recordPowerState(stack().db.pool, hostId, 'off', Date.now());
    const created = await admin('POST', '/v1/leases', { name: 'waits-for-boot', start_date: 'now', end_date: inSeconds(3600), reservations: [hostReservation({ resource_properties: JSON.stringify(['==', '$scenario', 'late-boot']) })] });
    expect(created.status).toBe(201);
    const lease = async () => (await admin('GET', `/v1/leases/${created.body.lease.id}`)).body.lease as { status: string; status_reason: string | null };
    // Woken at once; the start waits while it boots.
    await eventually(() => Promise.resolve(chassis.power('late-boot') === 'on' ? true : undefined), 45_000);
    const waiting = await eventually(async () => {
      const now = await lease();
      return now.status_reason?.startsWith('waiting for') ? now : undefined;
    }, 60_000);
    expect(waiting.status).toBe('STARTING');
    expect(waiting.status_reason).toMatch(/^waiting for host late-boot to boot \(expected up by \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\)$/);
    // Still waiting a few looks of the planner later: the start waits on the boot, not on a clock.
    const { lastLookMs } = await stack().temporal.client.workflow.getHandle(powerPlannerWorkflowId(stack().config.temporal.taskQueue)).query(getPowerPlannerState);
    await eventually(async () => (((await stack().temporal.client.workflow.getHandle(powerPlannerWorkflowId(stack().config.temporal.taskQueue)).query(getPowerPlannerState)).lastLookMs ?? 0) > (lastLookMs ?? 0) ? true : undefined), 45_000);
    expect((await lease()).status).toBe('STARTING');
    booted = true;
    const started = await eventually(async () => ((await lease()).status === 'ACTIVE' ? lease() : undefined), 45_000);
    expect(started.status_reason ?? null).toBeNull();
    expect(service(nova, 'late-boot').status).toBe('enabled');
  });
});

describe('a lease starting now on a sleeping host, the power planner not running', () => {
  const nova = new FakeNova();
  let bmc: SimulatedBmc | undefined;
  /** Whether the host's compute service has come up (the test says when, once its BMC is on). */
  let booted = false;
  beforeAll(async () => {
    bmc = await startSimulatedBmc({ power: 'off' });
  });
  afterAll(() => bmc?.stop());
  const stack = useTestStack(
    {
      // No planner (no hostPower for the stack): only the lease's start can wake the host. Its start moves it in the in-memory Nova.
      env: { LK_POWER_IPMI_CIPHER_SUITE: '3', LK_POWER_BOOT_SECONDS: '60' },
      withPool: (pool, config) => [
        physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => ({ nova: nova as unknown as NovaClient, glance }), freepool: 'freepool', power: hostPowerOver(nova)(pool, config) }),
      ],
    },
    { beforeStop: (s) => deleteAllLeases(apiClient(s.url)) },
  );
  const admin = apiClient(() => stack().url);

  it('is woken by the start itself, which says it waits for the boot, and goes active once Nova reports the host up', async () => {
    nova.serviceState = () => (booted && bmc!.power() === 'on' ? 'up' : 'down');
    nova.service('wakes-now');
    nova.aggregate('freepool', ['wakes-now']);
    const hostId = await insertHost(stack().db.pool, { name: 'wakes-now', capabilities: { scenario: 'wakes-now' } });
    expect((await admin('PUT', `/v1/os-hosts/${hostId}`, { power: { driver: 'ipmi', address: bmc!.address, port: bmc!.port, username: bmc!.username, password: bmc!.password } })).status).toBe(200);
    await recordPowerState(stack().db.pool, hostId, 'off', Date.now());
    const created = await admin('POST', '/v1/leases', { name: 'wakes-now', start_date: 'now', end_date: inSeconds(3600), reservations: [hostReservation({ resource_properties: JSON.stringify(['==', '$scenario', 'wakes-now']) })] });
    expect(created.status).toBe(201);
    expect(created.body.lease.reservations[0].hosts).toEqual(['wakes-now']);
    const lease = async () => (await admin('GET', `/v1/leases/${created.body.lease.id}`)).body.lease as { status: string; status_reason: string | null };
    // Woken by the start (nothing else runs that could), its wake recorded with its boot deadline.
    await eventually(() => Promise.resolve(bmc!.power() === 'on' ? true : undefined), 45_000);
    const waiting = await eventually(async () => {
      const now = await lease();
      return now.status_reason?.startsWith('waiting for') ? now : undefined;
    }, 45_000);
    expect(waiting.status).toBe('STARTING');
    expect(waiting.status_reason).toMatch(/^waiting for host wakes-now to boot \(expected up by \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\)$/);
    const wake = await stack().db.pool.query('SELECT power_state FROM host_power WHERE host_id = $1 AND wake_requested_at IS NOT NULL AND boot_deadline_at > now()', [hostId]);
    expect(wake.rows).toEqual([{ power_state: 'on' }]);
    // Its boot deadline is minutes away: the start waits on Nova, not on a clock.
    expect((await lease()).status).toBe('STARTING');
    booted = true;
    const started = await eventually(async () => ((await lease()).status === 'ACTIVE' ? lease() : undefined), 45_000);
    expect(started.status_reason ?? null).toBeNull();
    expect(nova.aggregates.find((a) => a.name === 'freepool')!.hosts).toEqual([]);
  });
});
