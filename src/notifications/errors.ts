/**
 * How a delivery went wrong, as the activities that deliver need to know it: try again later
 * (NoticeFailedError: the receiver or the broker is down, slow, or busy), or never (NoticeRefusedError:
 * the receiver said no, or the address is one a project's webhook may not reach).
 */

/** Retryable: a network error, a timeout, 5xx, 408/409/425/429, a redirect, a broker that did not confirm. */
export class NoticeFailedError extends Error {
  override readonly name = 'NoticeFailedError';
  constructor(
    message: string,
    /** The HTTP status, when the receiver answered. */
    readonly status?: number,
  ) {
    super(message);
  }
}

/** Final: the receiver refused the notice (another 4xx), or its address is refused (SSRF guard): retrying changes nothing. */
export class NoticeRefusedError extends Error {
  override readonly name = 'NoticeRefusedError';
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}
