/**
 * The `ipmi` driver: Debian's `ipmitool` over IPMI 2.0 (lanplus) against the host's BMC. The
 * password reaches ipmitool through its environment (`-E` reads IPMI_PASSWORD), never its command
 * line, where `ps` would show it to every user of the machine.
 */
import type { PowerState } from '../domain/host-power';
import type { PowerDriver } from './driver';
import { PowerAuthError, PowerFailedError, PowerUnreachableError } from './errors';
import { lastLine, runProgram, type ProgramRun } from './run-program';

export interface IpmiTarget {
  /** The host's name, for messages. */
  host: string;
  address: string;
  port: number;
  username: string;
  password: string;
}

export interface IpmiOptions {
  /** The whole call's bound (ipmitool's own retries included). */
  timeoutMs: number;
  /** The program (default `ipmitool` on PATH). */
  program?: string;
  /**
   * The RMCP+ cipher suite (`-C`); unset: ipmitool asks the BMC for its best, and takes 3 when the
   * BMC does not say (ipmi_sim does not: the question costs its retries, seconds).
   */
  cipherSuite?: number;
  /** ipmitool's retries of an unanswered request (`-R`, default 2): each waits longer (1 s, 4 s, 6 s…), so 2 knows a BMC down in about 6 s. */
  retries?: number;
}

/** ipmitool's verbose words for credentials a BMC refused (RAKP 2: wrong password; unauthorized name: no such user; a role above the user's). */
const REFUSED = /RAKP \d HMAC is invalid|unauthorized name|invalid role|insufficient privilege|unauthorized role|password.*(?:invalid|incorrect)/i;
/** …and for a BMC that did not answer at all. */
const NO_ANSWER = /Get Auth Capabilities error|Get Channel Authentication Capabilities|No response|timeout|Unable to establish|Insufficient resources for session/i;

export class IpmiDriver implements PowerDriver {
  readonly kind = 'ipmi' as const;

  constructor(
    private readonly target: IpmiTarget,
    private readonly options: IpmiOptions,
  ) {}

  async powerOn(signal?: AbortSignal): Promise<void> {
    await this.chassisPower('on', signal);
  }

  async powerOff(signal?: AbortSignal): Promise<void> {
    await this.chassisPower('off', signal);
  }

  async powerState(signal?: AbortSignal): Promise<PowerState> {
    const run = await this.chassisPower('status', signal);
    const said = /Chassis Power is (on|off)/i.exec(run.stdout);
    return said ? (said[1].toLowerCase() as 'on' | 'off') : 'unknown';
  }

  private async chassisPower(action: 'on' | 'off' | 'status', signal?: AbortSignal): Promise<ProgramRun> {
    const { host, address, port, username, password } = this.target;
    const cipher = this.options.cipherSuite === undefined ? [] : ['-C', String(this.options.cipherSuite)];
    const argv = [this.options.program ?? 'ipmitool', '-v', '-I', 'lanplus', ...cipher, '-N', '1', '-R', String(this.options.retries ?? 2), '-H', address, '-p', String(port), '-U', username, '-E', 'chassis', 'power', action];
    const run = await runProgram(argv, { host, env: { IPMI_PASSWORD: password }, timeoutMs: this.options.timeoutMs, signal });
    if (run.code === 0) return run;
    const said = `${run.stderr}\n${run.stdout}`;
    const where = `the BMC of ${host} (${address}:${port})`;
    if (REFUSED.test(said)) throw new PowerAuthError(`${where} refused user ${username}: check the power settings' username and password`, host);
    if (NO_ANSWER.test(said)) throw new PowerUnreachableError(`${where} did not answer: ${lastLine(run.stderr) || 'no session'}`, host);
    throw new PowerFailedError(`ipmitool chassis power ${action} failed for ${where} (exit ${run.code ?? 'by signal'}): ${lastLine(run.stderr) || lastLine(run.stdout)}`, host);
  }
}
