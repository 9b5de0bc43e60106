/**
 * The power drivers against real peers (issue 48): `ipmi` against OpenIPMI's ipmi_sim through
 * Debian's ipmitool, `command` with small programs, `ironic` against a stand-in answering as
 * Ironic's API reference says.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { HostPowerSettings } from '../src/domain/host-power';
import { waitUntil } from '../dev-stack/processes';
import { createSession } from '../src/openstack';
import { IronicClient } from '../src/openstack/ironic';
import { CommandDriver, IpmiDriver, IronicDriver, PowerAuthError, PowerConfigError, PowerFailedError, PowerTimeoutError, PowerUnreachableError, powerDriverFor } from '../src/power';
import { startIronicStandIn, type IronicStandIn } from './support/ironic-stand-in';
import { startSimulatedBmc, type SimulatedBmc } from './support/ipmi-sim';

const TIMEOUT_MS = 30_000;

function scratchDir(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'lk-power-'));
}

function program(dir: string, name: string, script: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
  return file;
}

describe('the ipmi driver against ipmi_sim', () => {
  let bmc: SimulatedBmc;
  beforeAll(async () => {
    bmc = await startSimulatedBmc({ power: 'on' });
  });
  afterAll(async () => {
    await bmc?.stop();
  });
  const driver = (password = bmc.password) => new IpmiDriver({ host: 'node-1', address: bmc.address, port: bmc.port, username: bmc.username, password }, { timeoutMs: TIMEOUT_MS, cipherSuite: bmc.cipherSuite });

  test('powers the chassis off and on, and reads its state', async () => {
    expect(await driver().powerState()).toBe('on');
    await driver().powerOff();
    expect(bmc.power()).toBe('off');
    expect(await driver().powerState()).toBe('off');
    // Idempotent: off again is no error.
    await driver().powerOff();
    await driver().powerOn();
    expect(bmc.power()).toBe('on');
    expect(await driver().powerState()).toBe('on');
  }, 60_000);

  test('a wrong password is a non-retryable PowerAuthError', async () => {
    const failure = await driver('not-the-password').powerState().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PowerAuthError);
    expect((failure as PowerAuthError).retryable).toBe(false);
    expect((failure as Error).message).not.toContain('not-the-password');
  }, 60_000);

  test('a BMC that does not answer is a retryable PowerUnreachableError', async () => {
    const gone = await startSimulatedBmc();
    await gone.stop();
    const failure = await new IpmiDriver({ host: 'node-2', address: gone.address, port: gone.port, username: gone.username, password: gone.password }, { timeoutMs: TIMEOUT_MS, cipherSuite: gone.cipherSuite, retries: 1 })
      .powerState()
      .catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PowerUnreachableError);
    expect((failure as PowerUnreachableError).retryable).toBe(true);
  }, 60_000);

  test('the password reaches ipmitool in its environment, never on its command line', async () => {
    const dir = scratchDir();
    const fakeIpmitool = program(dir, 'ipmitool', `printf '%s\\n' "$@" > "${dir}/argv"; printf '%s' "$IPMI_PASSWORD" > "${dir}/password"; env > "${dir}/env"; echo "Chassis Power is off"`);
    const state = await new IpmiDriver({ host: 'node-3', address: '192.0.2.7', port: 6230, username: 'admin', password: 'p4ss word' }, { timeoutMs: TIMEOUT_MS, program: fakeIpmitool }).powerState();
    expect(state).toBe('off');
    const argv = fs.readFileSync(path.join(dir, 'argv'), 'utf8').split('\n');
    expect(argv).toEqual(expect.arrayContaining(['-I', 'lanplus', '-H', '192.0.2.7', '-p', '6230', '-U', 'admin', '-E', 'chassis', 'power', 'status']));
    expect(argv.join(' ')).not.toContain('p4ss');
    expect(fs.readFileSync(path.join(dir, 'password'), 'utf8')).toBe('p4ss word');
    // Only what the program needs: none of the worker's own settings.
    expect(fs.readFileSync(path.join(dir, 'env'), 'utf8')).not.toMatch(/^(DATABASE_URL|OS_PASSWORD|LK_[A-Z_]+)=/m);
    fs.rmSync(dir, { recursive: true, force: true });
  });
});

describe('the command driver', () => {
  let dir: string;
  beforeEach(() => {
    dir = scratchDir();
  });
  afterEach(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  test('runs the programs with the host appended and in the environment; the status program says on or off', async () => {
    const on = program(dir, 'on', `echo "$1 $LK_POWER_HOST $LK_POWER_ADDRESS" > "${dir}/called"; echo on > "${dir}/state"`);
    const off = program(dir, 'off', `echo off > "${dir}/state"`);
    const status = program(dir, 'status', `cat "${dir}/state" 2>/dev/null || echo unknown`);
    const driver = new CommandDriver({ host: 'node-7', address: '10.0.0.7' }, { on: [on], off: [off, '--now'], status: [status] }, { timeoutMs: TIMEOUT_MS });
    expect(await driver.powerState()).toBe('unknown');
    await driver.powerOn();
    expect(fs.readFileSync(path.join(dir, 'called'), 'utf8').trim()).toBe('node-7 node-7 10.0.0.7');
    expect(await driver.powerState()).toBe('on');
    await driver.powerOff();
    expect(await driver.powerState()).toBe('off');
  });

  test('without a status program the state is unknown', async () => {
    const driver = new CommandDriver({ host: 'node-7', address: null }, { on: ['true'], off: ['true'] }, { timeoutMs: TIMEOUT_MS });
    expect(await driver.powerState()).toBe('unknown');
  });

  test('a non-zero exit is a retryable PowerFailedError quoting the program', async () => {
    const failing = program(dir, 'fail', 'echo "PDU outlet 4 busy" >&2; exit 3');
    const failure = await new CommandDriver({ host: 'node-8', address: null }, { on: [failing], off: [failing] }, { timeoutMs: TIMEOUT_MS }).powerOn().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PowerFailedError);
    expect((failure as PowerFailedError).retryable).toBe(true);
    expect((failure as Error).message).toContain('PDU outlet 4 busy');
  });

  test('a program that cannot run is a non-retryable PowerConfigError', async () => {
    const failure = await new CommandDriver({ host: 'node-8', address: null }, { on: [path.join(dir, 'missing')], off: ['true'] }, { timeoutMs: TIMEOUT_MS }).powerOn().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PowerConfigError);
    expect((failure as PowerConfigError).retryable).toBe(false);
  });

  test('a program past its bound is killed, with what it started, and is a retryable PowerTimeoutError', async () => {
    // The program starts a child that would outlive it; the whole group goes.
    const hanging = program(dir, 'hang', `sleep 600 & echo $! > "${dir}/child"; wait`);
    const failure = await new CommandDriver({ host: 'node-9', address: null }, { on: [hanging], off: ['true'] }, { timeoutMs: 3_000 }).powerOn().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PowerTimeoutError);
    const child = Number(fs.readFileSync(path.join(dir, 'child'), 'utf8'));
    // Gone, or a zombie waiting for its reaper: no longer running either way.
    const running = () => fs.existsSync(`/proc/${child}`) && !/\) Z /.test(fs.readFileSync(`/proc/${child}/stat`, 'utf8'));
    await waitUntil('the hung program\'s child killed', () => (running() ? Promise.reject(new Error(`process ${child} still runs`)) : Promise.resolve()), 5_000, 20);
  });
});

describe('the ironic driver against an Ironic stand-in', () => {
  let ironic: IronicStandIn;
  let client: IronicClient;
  beforeAll(async () => {
    ironic = await startIronicStandIn([
      { uuid: '1be26c0b-03f2-4d2e-ae87-c02d7f33c123', name: 'node-10', power_state: 'power on' },
      { uuid: '2be26c0b-03f2-4d2e-ae87-c02d7f33c124', name: 'node-11', power_state: 'power off', locked: true },
    ]);
    client = new IronicClient(createSession({ type: 'static', endpoints: { baremetal: ironic.url }, token: ironic.token }));
  });
  afterAll(async () => {
    await ironic?.close();
  });

  test('powers a node off and on through Ironic, with its API version header', async () => {
    const driver = new IronicDriver({ host: 'node-10', node: 'node-10' }, client, { timeoutMs: TIMEOUT_MS });
    expect(await driver.powerState()).toBe('on');
    await driver.powerOff();
    expect(await driver.powerState()).toBe('off');
    await driver.powerOn();
    expect(await driver.powerState()).toBe('on');
    const puts = ironic.requests.filter((r) => r.method === 'PUT');
    expect(puts.map((r) => [r.path, r.body])).toEqual([
      ['/v1/nodes/node-10/states/power', { target: 'power off' }],
      ['/v1/nodes/node-10/states/power', { target: 'power on' }],
    ]);
    expect(ironic.requests.every((r) => r.headers['x-openstack-ironic-api-version'] === '1.27')).toBe(true);
    // Already on: nothing is asked of Ironic.
    await driver.powerOn();
    expect(ironic.requests.filter((r) => r.method === 'PUT')).toHaveLength(2);
  });

  test("Ironic's errors become typed power errors, with Ironic's own reason", async () => {
    const unknown = await new IronicDriver({ host: 'node-x', node: 'no-such-node' }, client, { timeoutMs: TIMEOUT_MS }).powerState().catch((error: unknown) => error);
    expect(unknown).toBeInstanceOf(PowerConfigError);
    expect((unknown as Error).message).toContain('Node no-such-node could not be found.');
    const locked = await new IronicDriver({ host: 'node-11', node: 'node-11' }, client, { timeoutMs: TIMEOUT_MS }).powerOn().catch((error: unknown) => error);
    expect(locked).toBeInstanceOf(PowerFailedError);
    expect((locked as PowerFailedError).retryable).toBe(true);
    expect((locked as Error).message).toContain('is locked by host');
    const badToken = new IronicClient(createSession({ type: 'static', endpoints: { baremetal: ironic.url }, token: 'wrong' }));
    const refused = await new IronicDriver({ host: 'node-10', node: 'node-10' }, badToken, { timeoutMs: TIMEOUT_MS }).powerState().catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(PowerAuthError);
    expect((refused as PowerAuthError).retryable).toBe(false);
  });

  test('Ironic down is a retryable PowerUnreachableError', async () => {
    const down = new IronicClient(createSession({ type: 'static', endpoints: { baremetal: 'http://127.0.0.1:1' }, token: ironic.token }));
    const failure = await new IronicDriver({ host: 'node-10', node: 'node-10' }, down, { timeoutMs: TIMEOUT_MS }).powerState().catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(PowerUnreachableError);
  });
});

describe('choosing a driver by the host settings', () => {
  const settings = (patch: Partial<HostPowerSettings>): HostPowerSettings => ({
    driver: 'none', address: null, port: null, username: null, password: null, node: null, manage: true, bootSeconds: null, ...patch,
  });
  const deps = { timeoutMs: 1_000, ironic: () => new IronicClient(createSession({ type: 'static', endpoints: { baremetal: 'http://127.0.0.1:1' } })) };

  test('none has no driver; the others get theirs; incomplete settings are a PowerConfigError', () => {
    expect(powerDriverFor('h', settings({}), deps)).toBeUndefined();
    expect(powerDriverFor('h', settings({ driver: 'ipmi', address: '10.0.0.1', username: 'u', password: 'p' }), deps)?.kind).toBe('ipmi');
    expect(powerDriverFor('h', settings({ driver: 'ironic', node: 'n' }), deps)?.kind).toBe('ironic');
    expect(powerDriverFor('h', settings({ driver: 'command' }), { ...deps, commands: { on: ['true'], off: ['true'] } })?.kind).toBe('command');
    expect(() => powerDriverFor('h', settings({ driver: 'ipmi', address: '10.0.0.1', username: 'u' }), deps)).toThrow(PowerConfigError);
    expect(() => powerDriverFor('h', settings({ driver: 'command' }), deps)).toThrow(/LK_POWER_COMMAND_ON/);
  });
});
