/**
 * The `command` driver: the operator's own programs, as Slurm's SuspendProgram and ResumeProgram.
 * Each is an argv (no shell) from the deployment's settings; the host's name is appended as the last
 * argument and given as LK_POWER_HOST (its address, if set, as LK_POWER_ADDRESS). Exit status 0 is
 * done; the status program prints `on` or `off` (anything else is unknown).
 */
import type { PowerState } from '../domain/host-power';
import type { PowerDriver } from './driver';
import { PowerFailedError } from './errors';
import { lastLine, runProgram } from './run-program';

/** The deployment's power programs (LK_POWER_COMMAND_ON, _OFF, _STATUS). */
export interface PowerCommands {
  on: readonly string[];
  off: readonly string[];
  /** Without one, the state is unknown. */
  status?: readonly string[];
}

export class CommandDriver implements PowerDriver {
  readonly kind = 'command' as const;

  constructor(
    private readonly target: { host: string; address: string | null },
    private readonly commands: PowerCommands,
    private readonly options: { timeoutMs: number },
  ) {}

  async powerOn(signal?: AbortSignal): Promise<void> {
    await this.run('on', this.commands.on, signal);
  }

  async powerOff(signal?: AbortSignal): Promise<void> {
    await this.run('off', this.commands.off, signal);
  }

  async powerState(signal?: AbortSignal): Promise<PowerState> {
    if (!this.commands.status) return 'unknown';
    const said = (await this.run('status', this.commands.status, signal)).trim().split('\n')[0]?.trim().toLowerCase();
    return said === 'on' || said === 'off' ? said : 'unknown';
  }

  /** Runs one program; resolves with its output, throws PowerFailedError on a non-zero exit. */
  private async run(action: 'on' | 'off' | 'status', argv: readonly string[], signal?: AbortSignal): Promise<string> {
    const { host, address } = this.target;
    const env: Record<string, string> = { LK_POWER_HOST: host, LK_POWER_ACTION: action, ...(address === null ? {} : { LK_POWER_ADDRESS: address }) };
    const run = await runProgram([...argv, host], { host, env, timeoutMs: this.options.timeoutMs, signal });
    if (run.code !== 0) throw new PowerFailedError(`the power ${action} program for ${host} exited with ${run.code ?? 'a signal'}: ${lastLine(run.stderr) || lastLine(run.stdout) || 'no message'}`, host);
    return run.stdout;
  }
}
