/**
 * The `ironic` driver: a host that is an Ironic node is powered through Ironic's API, so that
 * Ironic's view of the node stays true. Ironic's typed client (src/openstack/ironic.ts) makes the
 * calls; its errors become the power errors the other drivers throw.
 */
import type { PowerState } from '../domain/host-power';
import { ConflictError, ForbiddenError, isRetryable, NotFoundError, BadRequestError, OpenStackError, TimeoutError, UnauthorizedError } from '../openstack/errors';
import type { IronicClient, IronicPowerTarget } from '../openstack/ironic';
import type { PowerDriver } from './driver';
import { PowerAuthError, PowerConfigError, PowerError, PowerFailedError, PowerTimeoutError, PowerUnreachableError } from './errors';

export class IronicDriver implements PowerDriver {
  readonly kind = 'ironic' as const;

  constructor(
    private readonly target: { host: string; node: string },
    private readonly ironic: IronicClient,
    private readonly options: { timeoutMs: number },
  ) {}

  async powerOn(signal?: AbortSignal): Promise<void> {
    await this.change('power on', signal);
  }

  async powerOff(signal?: AbortSignal): Promise<void> {
    await this.change('power off', signal);
  }

  async powerState(signal?: AbortSignal): Promise<PowerState> {
    const node = await this.call(() => this.ironic.getNodePower(this.target.node, { timeoutMs: this.options.timeoutMs, signal }));
    return node.power_state === 'power on' ? 'on' : node.power_state === 'power off' ? 'off' : 'unknown';
  }

  /** Asks for the target unless the node is already there (Ironic would take the request again, and lock the node meanwhile). */
  private async change(target: IronicPowerTarget, signal?: AbortSignal): Promise<void> {
    const node = await this.call(() => this.ironic.getNodePower(this.target.node, { timeoutMs: this.options.timeoutMs, signal }));
    if (node.power_state === target && node.target_power_state === null) return;
    await this.call(() => this.ironic.setNodePower(this.target.node, target, { timeoutMs: this.options.timeoutMs, signal }));
  }

  private async call<T>(request: () => Promise<T>): Promise<T> {
    try {
      return await request();
    } catch (error) {
      throw this.powerError(error);
    }
  }

  private powerError(error: unknown): unknown {
    if (!(error instanceof OpenStackError)) return error;
    const { host, node } = this.target;
    const options = { cause: error };
    const said = `Ironic, node ${node}: ${error.message}`;
    if (error instanceof UnauthorizedError || error instanceof ForbiddenError) return new PowerAuthError(said, host, options);
    if (error instanceof NotFoundError || error instanceof BadRequestError) return new PowerConfigError(said, host, options);
    // NodeLocked: another operation holds the node; it ends on its own.
    if (error instanceof ConflictError) return new PowerFailedError(said, host, options);
    if (error instanceof TimeoutError) return new PowerTimeoutError(said, host, options);
    return isRetryable(error) ? new PowerUnreachableError(said, host, options) : (new PowerConfigError(said, host, options) satisfies PowerError);
  }
}
