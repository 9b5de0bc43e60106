/** Polling helpers shared by the clients' `waitFor…` methods. */
import { ResourceFailedError, WaitTimeoutError } from './errors';

export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason as Error);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = (): void => {
      clearTimeout(timer);
      reject(signal?.reason as Error);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Polls `read` until `done` accepts the value or the time is up; shared by the wait helpers. */
export async function pollUntil<T>(
  read: () => Promise<T>,
  done: (value: T) => boolean,
  options: { timeoutMs: number; intervalMs: number; what: string; failed?: (value: T) => string | undefined; signal?: AbortSignal },
): Promise<T> {
  const deadline = Date.now() + options.timeoutMs;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    const failure = options.failed?.(value);
    if (failure !== undefined) throw new ResourceFailedError(`${options.what}: ${failure}`, value);
    const left = deadline - Date.now();
    if (left <= 0) throw new WaitTimeoutError(`${options.what}: not reached within ${options.timeoutMs} ms`, value);
    await sleep(Math.min(options.intervalMs, left), options.signal);
  }
}

