/**
 * How long an end waits for the servers it deleted to be gone. Servers stuck in `deleting` (a
 * compute host down, a hung hypervisor) need an operator: past the time-out the end fails, the
 * lease goes to ERROR with the servers named, and the booking keeps the resources until then.
 */
import { ApplicationFailure } from '@temporalio/common';

/** Blazar's own bound on waiting for deleted servers. */
export const DEFAULT_SERVER_DELETE_TIMEOUT_MS = 10 * 60_000;

/**
 * Throws the end's final failure when it is still `waitingFor` something `timeoutMs` after `sinceMs`;
 * `type` names what is left (servers by default; a network reservation's ports and network: `NetworkNotDeleted`).
 */
export function failIfDeletionOverdue(waitingFor: string, sinceMs: number, timeoutMs: number, type = 'ServersNotDeleted'): void {
  if (Date.now() > sinceMs + timeoutMs) throw ApplicationFailure.nonRetryable(`${waitingFor} ${timeoutMs / 1000} s after the end`, type);
}
