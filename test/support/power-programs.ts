/**
 * Power programs for the `command` driver's tests of the planner's steps (test/power-safety.test.ts,
 * test/power-planner.test.ts): each host's chassis is a file in a scratch directory, and a few
 * more files make its programs misbehave as BMCs do: hang, fail, or take "on" and do nothing.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { PowerCommands } from '../../src/power';

export interface TestChassis {
  /** The programs (on, off, status), for the driver's deps or LK_POWER_COMMAND_* (JSON arrays). */
  commands: PowerCommands;
  /** Sets the host's chassis on or off (its file). */
  set(host: string, state: 'on' | 'off'): void;
  /** The host's chassis as its file says. */
  power(host: string): string;
  /**
   * Makes the host's programs misbehave: `hang-off` (off waits for `release`, 60 s at most),
   * `fail` (every change exits 1), `ignore-on` (on exits 0 and changes nothing); `release` ends a hang.
   */
  flag(host: string, what: 'hang-off' | 'release' | 'fail' | 'ignore-on'): void;
  remove(): void;
}

export function testChassis(): TestChassis {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-power-programs-'));
  const program = (name: string, body: string) => {
    const file = path.join(dir, name);
    fs.writeFileSync(file, `#!/bin/sh\nd='${dir}'\nh="$LK_POWER_HOST"\n${body}\n`, { mode: 0o755 });
    return [file];
  };
  const file = (host: string, what: string) => path.join(dir, `${host}.${what}`);
  return {
    commands: {
      on: program('on', '[ -f "$d/$h.fail" ] && { echo "refused by the test" >&2; exit 1; }\n[ -f "$d/$h.ignore-on" ] || echo on > "$d/$h.power"'),
      off: program(
        'off',
        'if [ -f "$d/$h.hang-off" ]; then i=0; while [ ! -f "$d/$h.release" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; fi\n[ -f "$d/$h.fail" ] && { echo "refused by the test" >&2; exit 1; }\necho off > "$d/$h.power"',
      ),
      status: program('status', 'cat "$d/$h.power" 2>/dev/null || echo unknown'),
    },
    set: (host, state) => fs.writeFileSync(file(host, 'power'), `${state}\n`),
    power: (host) => fs.readFileSync(file(host, 'power'), 'utf8').trim(),
    flag: (host, what) => fs.writeFileSync(file(host, what), ''),
    remove: () => fs.rmSync(dir, { recursive: true, force: true }),
  };
}
