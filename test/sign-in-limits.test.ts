/**
 * The sign-in limits' counters on an injected clock: windows end when they should, memory stays
 * bounded whatever the keys, what was no failure is taken back, and IPv6 clients count per /64.
 */
import { addressKey, signInThrottle, SignInLimited, WindowCounter } from '../src/api/sign-in-limits';

function refusal(run: () => unknown): SignInLimited {
  try {
    run();
  } catch (err) {
    expect(err).toBeInstanceOf(SignInLimited);
    return err as SignInLimited;
  }
  throw new Error('not refused');
}

describe('sign-in limits', () => {
  it('holds a key at its limit until its window ends, and says how long', () => {
    let now = 1_000_000;
    const counter = new WindowCounter({ limit: 3, windowMs: 60_000, maxKeys: 10, now: () => now });
    for (let i = 0; i < 3; i++) {
      expect(counter.waitMs('k')).toBe(0);
      counter.add('k');
      now += 1_000;
    }
    expect(counter.waitMs('k')).toBe(57_000);
    expect(counter.waitMs('other')).toBe(0);
    now += 57_000;
    expect(counter.waitMs('k')).toBe(0);
  });

  it('remembers at most maxKeys keys, dropping ended windows first, then the oldest', () => {
    let now = 0;
    const counter = new WindowCounter({ limit: 1, windowMs: 1_000, maxKeys: 100, now: () => now });
    for (let i = 0; i < 10_000; i++) {
      counter.add(`spray-${i}`);
      now += 1;
      expect(counter.size).toBeLessThanOrEqual(100);
    }
    expect(counter.waitMs('spray-9999')).toBeGreaterThan(0); // the newest are kept
    expect(counter.waitMs('spray-9899')).toBe(0); // the oldest made room
    now += 1_000;
    counter.add('late');
    expect(counter.size).toBe(1); // every ended window went
  });

  it('takes back an attempt that was no failure, and a success clears its name', () => {
    const throttle = signInThrottle({ failuresPerUser: 2, failuresPerAddress: 3, windowMs: 60_000, now: () => 0 });
    throttle.begin('Default/Alice', '10.0.0.1').refused();
    throttle.begin('default/alice', '10.0.0.1').undecided(); // Keystone failed: not counted
    throttle.begin('default/alice', '10.0.0.1').refused();
    expect(refusal(() => throttle.begin('DEFAULT/ALICE', '10.0.0.2')).message).toBe('Too many failed sign-ins for this user name: try again in 60 s');
    expect(refusal(() => throttle.begin('default/alice', '10.0.0.2')).retryAfterSeconds).toBe(60);
    throttle.begin('default/bob', '10.0.0.1').succeeded();
    throttle.begin('default/carol', '10.0.0.1').refused(); // the address's third failure
    expect(refusal(() => throttle.begin('default/dave', '10.0.0.1')).message).toMatch(/from this address/);
    // A success forgets its name's failures.
    const other = signInThrottle({ failuresPerUser: 2, failuresPerAddress: 100, windowMs: 60_000, now: () => 0 });
    other.begin('default/erin', '10.0.0.3').refused();
    other.begin('default/erin', '10.0.0.3').succeeded();
    other.begin('default/erin', '10.0.0.3').refused();
    expect(() => other.begin('default/erin', '10.0.0.3')).not.toThrow();
  });

  it('counts an IPv6 client by its /64, and an IPv4-mapped one by its IPv4 address', () => {
    expect(addressKey('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8:1:2:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(addressKey('2001:db8::1')).toBe('2001:db8:0:0::/64');
    expect(addressKey('::1')).toBe('0:0:0:0::/64');
    expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
    expect(addressKey('::ffff:192.0.2.7')).toBe('192.0.2.7');
    expect(addressKey('192.0.2.7')).toBe('192.0.2.7');
    const throttle = signInThrottle({ failuresPerUser: 100, failuresPerAddress: 1, windowMs: 60_000, now: () => 0 });
    throttle.begin('default/a', '2001:db8:1:2::10').refused();
    expect(refusal(() => throttle.begin('default/b', '2001:db8:1:2::20')).message).toMatch(/from this address/);
    expect(() => throttle.begin('default/c', '2001:db8:1:3::10')).not.toThrow();
  });
});
