/**
 * Typed failures of the power drivers. `retryable` tells the caller (a Temporal activity's retry
 * policy, or the API's answer) whether the same call may succeed later: a BMC that did not answer
 * may come back, refused credentials or a missing program will not until an admin changes them.
 */
export abstract class PowerError extends Error {
  abstract override readonly name: string;
  abstract readonly retryable: boolean;
  constructor(
    message: string,
    /** The host (hypervisor name) whose power was asked for. */
    readonly host: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The BMC or Ironic refused the credentials (wrong user or password, or too little privilege). */
export class PowerAuthError extends PowerError {
  override readonly name = 'PowerAuthError';
  readonly retryable = false;
}

/** The host's settings or the deployment's cannot work: a program missing, a node Ironic does not know, an incomplete setting. */
export class PowerConfigError extends PowerError {
  override readonly name = 'PowerConfigError';
  readonly retryable = false;
}

/** The BMC, Ironic or the program did not answer (down, unreachable, overloaded). */
export class PowerUnreachableError extends PowerError {
  override readonly name = 'PowerUnreachableError';
  readonly retryable = true;
}

/** The call took longer than its bound and was given up (the program killed). */
export class PowerTimeoutError extends PowerError {
  override readonly name = 'PowerTimeoutError';
  readonly retryable = true;
}

/** Anything else that failed: the program's non-zero exit, a BMC's error answer, a node busy with another operation. */
export class PowerFailedError extends PowerError {
  override readonly name = 'PowerFailedError';
  readonly retryable = true;
}
