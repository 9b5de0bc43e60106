/**
 * A BMC for the `ipmi` power driver's tests: OpenIPMI's `ipmi_sim` (Debian's `openipmi`) on
 * 127.0.0.1 at a free UDP port below the ephemeral range, with one admin user, IPMI 2.0 (lanplus),
 * and a chassis whose power is a file: its chassis control program (ipmi_sim runs it as
 * `<program> <mc> get power` and `<program> <mc> set power 0|1`) reads and writes that file. Stopped
 * by its PID.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { freeUdpPort } from '../../dev-stack/ports';
import { ManagedProcess, waitUntil } from '../../dev-stack/processes';

export interface SimulatedBmc {
  address: string;
  port: number;
  username: string;
  password: string;
  /** The cipher suite ipmi_sim speaks (it does not answer ipmitool's question for its best). */
  cipherSuite: number;
  /** What the simulated chassis's power is now, read from its file. */
  power(): 'on' | 'off';
  stop(): Promise<void>;
}

/** The chassis control program: `get power` prints `power:1|0`, `set power 1|0` writes it. */
const CHASSIS_CONTROL = `#!/bin/sh
state="$(dirname "$0")/power"
shift
op="$1"
shift
case "$op" in
  get)
    for parm in "$@"; do
      case "$parm" in
        power) [ -f "$state" ] || echo 1 > "$state"; echo "power:$(cat "$state")" ;;
        boot) echo "boot:default" ;;
        *) echo "no such parameter: $parm"; exit 1 ;;
      esac
    done ;;
  set)
    while [ $# -ge 2 ]; do
      case "$1" in
        power) echo "$2" > "$state" ;;
        boot|reset) ;;
        *) echo "no such parameter: $1"; exit 1 ;;
      esac
      shift 2
    done ;;
  *) echo "no such operation: $op"; exit 1 ;;
esac
`;

/** Whether a UDP socket is bound on 127.0.0.1:port (the kernel's table: ipmi_sim prints nothing when ready). */
function udpBound(port: number): boolean {
  const local = `0100007F:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  return fs.readFileSync('/proc/net/udp', 'utf8').split('\n').some((line) => line.trim().split(/\s+/)[1] === local);
}

export async function startSimulatedBmc(options: { power?: 'on' | 'off' } = {}): Promise<SimulatedBmc> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-ipmi-sim-'));
  const port = await freeUdpPort();
  const username = 'lkadmin';
  const password = 'bmc-secret-1';
  fs.writeFileSync(path.join(dir, 'chassis-control'), CHASSIS_CONTROL, { mode: 0o755 });
  fs.writeFileSync(path.join(dir, 'power'), options.power === 'off' ? '0\n' : '1\n');
  fs.mkdirSync(path.join(dir, 'state'));
  fs.writeFileSync(
    path.join(dir, 'lan.conf'),
    [
      'name "lk-test-bmc"',
      'set_working_mc 0x20',
      'startlan 1',
      `  addr 127.0.0.1 ${port}`,
      '  priv_limit admin',
      '  allowed_auths_admin md5',
      '  guid a123456789abcdefa123456789abcdef',
      'endlan',
      `chassis_control "${path.join(dir, 'chassis-control')} 0x20"`,
      `user 2 true "${username}" "${password}" admin 10 md5`,
      '',
    ].join('\n'),
  );
  // The BMC itself (management controller 0x20), and nothing else: power is all the tests ask of it.
  fs.writeFileSync(
    path.join(dir, 'bmc.emu'),
    ['mc_setbmc 0x20', 'mc_add 0x20 0 no-device-sdrs 0x23 0x09 0x08 0x9f 0x1291 0xf02 persist_sdr', 'mc_enable 0x20', ''].join('\n'),
  );
  const sim = new ManagedProcess({
    name: 'ipmi_sim',
    command: 'ipmi_sim',
    args: ['-c', path.join(dir, 'lan.conf'), '-f', path.join(dir, 'bmc.emu'), '-s', path.join(dir, 'state'), '-n'],
    cwd: dir,
  });
  try {
    const bound = () => {
      if (!sim.running) throw new Error(`ipmi_sim exited: ${sim.tail()}`);
      if (!udpBound(port)) throw new Error(`nothing bound on udp 127.0.0.1:${port} yet`);
    };
    await waitUntil('ipmi_sim', () => Promise.resolve().then(bound), 10_000, 50);
  } catch (error) {
    await sim.stop();
    fs.rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    address: '127.0.0.1',
    port,
    username,
    password,
    cipherSuite: 3,
    power: () => (fs.readFileSync(path.join(dir, 'power'), 'utf8').trim() === '0' ? 'off' : 'on'),
    stop: async () => {
      await sim.stop(5_000);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
