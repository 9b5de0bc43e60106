/** The one interface every power driver implements (ipmi.ts, command.ts, ironic.ts). */
import type { PowerDriverKind, PowerState } from '../domain/host-power';

/**
 * One host's power. `powerOn` and `powerOff` resolve once the BMC (program, Ironic) has taken the
 * request, not when the host is up: `powerState` tells when it is done. Each call is bounded by
 * the driver's time-out and fails with a PowerError (errors.ts) whose `retryable` says whether to
 * try again. Both changes are idempotent: powering on a host that is on does nothing.
 */
export interface PowerDriver {
  readonly kind: Exclude<PowerDriverKind, 'none'>;
  powerOn(signal?: AbortSignal): Promise<void>;
  powerOff(signal?: AbortSignal): Promise<void>;
  powerState(signal?: AbortSignal): Promise<PowerState>;
}
