/**
 * The power planner (issue 48) against the rig's Nova: a fake compute host with the `command` power
 * driver (a program that keeps its power in a file: the fake compute itself keeps running) is put
 * to sleep, its nova-compute service disabled first with the planner's reason; a lease 30 minutes
 * ahead (boot 2 s, margin 1795 s) wakes it, and once Nova reports the service up the planner enables
 * it again. Every service is enabled again at the end, whatever happens.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { blazarHostReservation } from '../../dev-stack/fixtures/builders';
import { enrolHost } from '../../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { recordPowerState } from '../../src/db/host-power';
import { physicalHostPlugin } from '../../src/resources/physical-host';
import { deploymentHostPower, POWERED_OFF_REASON } from '../../src/resources/physical-host/power';
import { planNow, powerPlannerWorkflowId } from '../../workflows/power-planner/messages';
import { deleteAggregateNamed, rigClients, uniqueName } from './support';

const HOST = 'fake-1';
const CLOSED_PROJECT = 'leasekeeper-freepool';

describe('the power planner with the rig', () => {
  const admin = rigClients('leasekeeper-admin');
  const freepool = uniqueName('freepool');
  const failedAggregate = uniqueName('failed');
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-power-'));
  const program = path.join(dir, 'power');
  fs.writeFileSync(program, `#!/bin/sh\nstate="${dir}/state-$LK_POWER_HOST"\ncase "$LK_POWER_ACTION" in\n  on|off) echo "$LK_POWER_ACTION" > "$state" ;;\n  status) cat "$state" 2>/dev/null || echo on ;;\nesac\n`, { mode: 0o755 });
  const powerOf = () => (fs.existsSync(path.join(dir, `state-${HOST}`)) ? fs.readFileSync(path.join(dir, `state-${HOST}`), 'utf8').trim() : 'on');
  let hostId: string | undefined;

  const stack = useTestStack(
    () => ({
      env: {
        LK_FREEPOOL_AGGREGATE: freepool, LK_FAILED_AGGREGATE: failedAggregate,
        LK_POWER_PLANNER: 'on', LK_POWER_COMMAND_ON: JSON.stringify([program]), LK_POWER_COMMAND_OFF: JSON.stringify([program]), LK_POWER_COMMAND_STATUS: JSON.stringify([program]),
        LK_POWER_BOOT_SECONDS: '2', LK_POWER_WAKE_MARGIN_SECONDS: '1795', LK_POWER_OFF_AFTER_IDLE: '30m', LK_POWER_RECHECK_SECONDS: '3600',
      },
      config: (config) => ({ ...config, power: { ...config.power, bootPollMs: 500 } }),
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: () => admin, freepool, failedAggregate, endAggregates: { closedProjectId: CLOSED_PROJECT } })],
      hostPower: (pool, config) => deploymentHostPower(pool, config.power, { ironic: () => admin.ironic, nova: () => admin.nova }),
      openstack: () => admin,
    }),
    {
      beforeStop: async () => {
        const [service] = await admin.nova.listServices({ binary: 'nova-compute', host: HOST });
        if (service?.status === 'disabled') await admin.nova.updateService(service.id, { status: 'enabled' });
        await deleteAllLeases(api);
        if (hostId) await api('DELETE', `/v1/os-hosts/${hostId}`);
        await deleteAggregateNamed(admin, freepool);
        await deleteAggregateNamed(admin, failedAggregate);
        fs.rmSync(dir, { recursive: true, force: true });
      },
      timeoutMs: 180_000,
    },
  );
  const api = apiClient(() => stack().url);
  const serviceOf = async () => (await admin.nova.listServices({ binary: 'nova-compute', host: HOST }))[0];

  it('disables the compute service before powering the host off, and enables it once up after a wake', async () => {
    const started = Date.now();
    hostId = await enrolHost(api, HOST);
    expect((await api('PUT', `/v1/os-hosts/${hostId}`, { power: { driver: 'command' } })).status).toBe(200);
    await recordPowerState(stack().db.pool, hostId, 'on', Date.now());
    await stack().temporal.client.workflow.getHandle(powerPlannerWorkflowId(stack().config.temporal.taskQueue)).signal(planNow);
    await eventually(() => Promise.resolve(powerOf() === 'off' ? true : undefined), 45_000, 200, () => 'not yet: powered off');
    const disabled = await serviceOf();
    expect(disabled).toMatchObject({ status: 'disabled', disabled_reason: `${POWERED_OFF_REASON}, idle until no booking` });

    const created = await api('POST', '/v1/leases', { name: uniqueName('woken'), start_date: inSeconds(1800), end_date: inSeconds(3600), reservations: [blazarHostReservation()] });
    expect(created.status).toBe(201);
    expect(created.body.lease.reservations[0].hosts).toEqual([HOST]);
    await eventually(async () => ((await serviceOf()).status === 'enabled' ? true : undefined), 60_000, 200, () => 'not yet: enabled again');
    expect(powerOf()).toBe('on');
    console.log(`[rig] power planner: off with its service disabled, woken and enabled again in ${Date.now() - started} ms`);
  });
});
