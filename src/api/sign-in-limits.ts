/**
 * Limits on the calendar page's password sign-in (POST /calendar/login): each attempt costs Keystone
 * a password check, and a guess that is not limited is a free brute force. Failed sign-ins are
 * counted per user name (in its domain) and per client address, each in a fixed window; past either
 * limit the sign-in is a 429 with Retry-After, before Keystone is asked. An attempt counts from its
 * start (concurrent guesses cannot all slip under the limit) and is taken back when it was not a
 * refusal: a success (which also clears its user name's failures) or Keystone failing. So a user
 * signing in from their own address is held up only by their own name's failures and by their
 * address's, never by guesses at other names from elsewhere.
 */
import net from 'node:net';
import { ApiError } from './errors';

/** Counts per key in fixed windows, for at most `maxKeys` keys (the oldest window goes first). */
export class WindowCounter {
  // Map order is insertion order, and a key is inserted when its window starts: the first entry's window ends first.
  private readonly windows = new Map<string, { count: number; endsAt: number }>();

  constructor(private readonly options: { limit: number; windowMs: number; maxKeys: number; now: () => number }) {}

  get size(): number {
    return this.windows.size;
  }

  /** How long until `key` is under its limit again: 0 when it is now. */
  waitMs(key: string): number {
    const window = this.current(key);
    return window && window.count >= this.options.limit ? window.endsAt - this.options.now() : 0;
  }

  add(key: string): void {
    const window = this.current(key);
    if (window) {
      window.count++;
      return;
    }
    this.evictFor();
    this.windows.set(key, { count: 1, endsAt: this.options.now() + this.options.windowMs });
  }

  /** Takes one back (an attempt that was no failure). */
  remove(key: string): void {
    const window = this.current(key);
    if (window && --window.count <= 0) this.windows.delete(key);
  }

  clear(key: string): void {
    this.windows.delete(key);
  }

  private current(key: string): { count: number; endsAt: number } | undefined {
    const window = this.windows.get(key);
    if (window && window.endsAt <= this.options.now()) {
      this.windows.delete(key);
      return undefined;
    }
    return window;
  }

  /** Room for one more key: ended windows go, then (when still full) the one that ends first. */
  private evictFor(): void {
    const now = this.options.now();
    for (const [key, window] of this.windows) {
      if (this.windows.size < this.options.maxKeys && window.endsAt > now) return;
      this.windows.delete(key);
    }
  }
}

export interface SignInLimits {
  /** Failed sign-ins per user name (in its domain) within a window. */
  failuresPerUser: number;
  /** Failed sign-ins per client address (IPv6: per /64) within a window. */
  failuresPerAddress: number;
  windowMs: number;
  /** User names and addresses remembered at most, each (memory stays bounded whatever the callers send). */
  maxTracked?: number;
  now?: () => number;
}

export const DEFAULT_MAX_TRACKED = 10_000;

/**
 * The key of a client address: an IPv4 address (also when IPv4-mapped), or an IPv6 address's /64,
 * which one client usually holds whole.
 */
export function addressKey(address: string): string {
  const bare = address.replace(/%.*$/, ''); // a zone id (fe80::1%eth0)
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(bare);
  if (mapped) return mapped[1];
  if (!net.isIPv6(bare)) return bare;
  const [head, tail] = bare.split('::');
  const front = head ? head.split(':') : [];
  const back = tail ? tail.split(':') : [];
  const groups = tail === undefined ? front : [...front, ...Array<string>(Math.max(0, 8 - front.length - back.length)).fill('0'), ...back];
  return `${groups.slice(0, 4).map((group) => parseInt(group, 16).toString(16)).join(':')}::/64`;
}

export interface SignInAttempt {
  /** Keystone accepted the password: the user name's failures are forgotten. */
  succeeded(): void;
  /** Keystone refused it: the failure stays counted. */
  refused(): void;
  /** No answer either way (Keystone failed): not the caller's failure. */
  undecided(): void;
}

export interface SignInThrottle {
  /** Counts an attempt, or throws a 429 (`retryAfterSeconds` set for the Retry-After header) when a limit is reached. */
  begin(user: string, address: string): SignInAttempt;
}

export class SignInLimited extends ApiError {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super(429, message);
  }
}

export function signInThrottle(limits: SignInLimits): SignInThrottle {
  const now = limits.now ?? Date.now;
  const maxKeys = limits.maxTracked ?? DEFAULT_MAX_TRACKED;
  const byUser = new WindowCounter({ limit: limits.failuresPerUser, windowMs: limits.windowMs, maxKeys, now });
  const byAddress = new WindowCounter({ limit: limits.failuresPerAddress, windowMs: limits.windowMs, maxKeys, now });
  return {
    begin(user, address) {
      const userKey = user.toLowerCase(); // Keystone's SQL backend matches names regardless of case
      const addressOf = addressKey(address);
      const userWait = byUser.waitMs(userKey);
      const addressWait = byAddress.waitMs(addressOf);
      if (userWait > 0 || addressWait > 0) {
        const seconds = Math.ceil(Math.max(userWait, addressWait) / 1000);
        const which = userWait > 0 ? 'for this user name' : 'from this address';
        throw new SignInLimited(`Too many failed sign-ins ${which}: try again in ${seconds} s`, seconds);
      }
      byUser.add(userKey);
      byAddress.add(addressOf);
      let settled = false;
      const settle = (then: () => void) => () => {
        if (settled) return;
        settled = true;
        then();
      };
      return {
        succeeded: settle(() => {
          byUser.clear(userKey);
          byAddress.remove(addressOf);
        }),
        refused: settle(() => undefined),
        undecided: settle(() => {
          byUser.remove(userKey);
          byAddress.remove(addressOf);
        }),
      };
    },
  };
}
