/** The one date module (src/domain/dates.ts): each form leasekeeper writes, and the request dates it reads. */
import fc from 'fast-check';
import {
  formatBlazarDate,
  formatBlazarTimestamp,
  formatMessageDate,
  formatMonth,
  formatRequestDate,
  parseRequestDate,
  pythonIsoformat,
  reuseEnd,
  reuseStart,
  wholeMinuteDown,
  wholeMinuteUp,
} from '../src/domain/dates';

const WITH_MILLIS = Date.UTC(2026, 10, 21, 9, 15, 7, 42);
const WITH_SECONDS = Date.UTC(2026, 10, 21, 9, 15, 7);
const WHOLE_MINUTE = Date.UTC(2026, 10, 21, 9, 15);
/** Instants from 1970 to 2999, to the millisecond. */
const instant = fc.integer({ min: 0, max: Date.UTC(2999, 11, 31, 23, 59, 59, 999) });

describe('dates as leasekeeper writes them', () => {
  it("writes Blazar's API date with microseconds always", () => {
    expect(formatBlazarDate(WITH_MILLIS)).toBe('2026-11-21T09:15:07.042000');
    expect(formatBlazarDate(WHOLE_MINUTE)).toBe('2026-11-21T09:15:00.000000');
  });

  it("writes Blazar's record timestamps to the second", () => {
    expect(formatBlazarTimestamp(WITH_MILLIS)).toBe('2026-11-21 09:15:07');
    expect(formatBlazarTimestamp(WHOLE_MINUTE)).toBe('2026-11-21 09:15:00');
  });

  it('writes a request date as the minute the instant falls in', () => {
    expect(formatRequestDate(WITH_MILLIS)).toBe('2026-11-21 09:15');
    expect(formatRequestDate(Date.UTC(2026, 11, 31, 23, 59, 59, 999))).toBe('2026-12-31 23:59');
  });

  it('writes an instant in a message with seconds only when they matter', () => {
    expect(formatMessageDate(WHOLE_MINUTE)).toBe('2026-11-21 09:15');
    expect(formatMessageDate(WITH_SECONDS)).toBe('2026-11-21 09:15:07');
    expect(formatMessageDate(WITH_MILLIS)).toBe('2026-11-21 09:15:07');
  });

  it('hands back request dates rounded to stay valid: a start later, an end earlier', () => {
    expect(reuseStart(WITH_SECONDS)).toBe('2026-11-21 09:16');
    expect(reuseEnd(WITH_SECONDS)).toBe('2026-11-21 09:15');
    expect([reuseStart(WHOLE_MINUTE), reuseEnd(WHOLE_MINUTE)]).toEqual(['2026-11-21 09:15', '2026-11-21 09:15']);
    fc.assert(
      fc.property(instant, (ms) => {
        expect(wholeMinuteUp(ms)).toBeGreaterThanOrEqual(ms);
        expect(wholeMinuteDown(ms)).toBeLessThanOrEqual(ms);
        expect(wholeMinuteUp(ms) - wholeMinuteDown(ms)).toBe(ms % 60_000 === 0 ? 0 : 60_000);
        expect(parseRequestDate(reuseStart(ms))).toBe(wholeMinuteUp(ms));
        expect(parseRequestDate(reuseEnd(ms))).toBe(wholeMinuteDown(ms));
      }),
    );
  });

  it("writes Python's isoformat: the fraction only when not zero, with the separator asked (oslo's is a space)", () => {
    expect(pythonIsoformat(WITH_MILLIS)).toBe('2026-11-21T09:15:07.042000');
    expect(pythonIsoformat(WITH_SECONDS)).toBe('2026-11-21T09:15:07');
    expect(pythonIsoformat(WITH_MILLIS, ' ')).toBe('2026-11-21 09:15:07.042000');
    expect(pythonIsoformat(WITH_SECONDS, ' ')).toBe('2026-11-21 09:15:07');
  });

  it('writes the month an instant falls in', () => {
    expect(formatMonth(Date.UTC(2026, 0, 31, 23, 59, 59, 999))).toBe('2026-01');
    expect(formatMonth(Date.UTC(2026, 1, 1))).toBe('2026-02');
  });
});

describe('request dates as leasekeeper reads them', () => {
  it.each([
    ['2026-11-21 09:15', WHOLE_MINUTE],
    ['2026-11-21T09:15', WHOLE_MINUTE],
    ['2026-11-21 09:15:07', WITH_SECONDS],
    ['2026-11-21T09:15:07.042000', WITH_MILLIS],
    ['2026-11-21T09:15:07.042Z', WITH_MILLIS],
    [' 2026-11-21 09:15 ', WHOLE_MINUTE],
  ])('reads %j', (text, ms) => {
    expect(parseRequestDate(text)).toBe(ms);
  });

  it.each(['2026-02-30 10:00', '2026-11-21 24:00', '2026-11-21 09:60', '2026-11-21 09:15:60', '21/11/2026 09:15', '2026-11-21', 'now', ''])('refuses %j', (text) => {
    expect(parseRequestDate(text)).toBeUndefined();
  });

  it('reads back every form it writes, to its precision', () => {
    fc.assert(
      fc.property(instant, (ms) => {
        expect(parseRequestDate(formatBlazarDate(ms))).toBe(ms);
        expect(parseRequestDate(pythonIsoformat(ms))).toBe(ms);
        expect(parseRequestDate(pythonIsoformat(ms, ' '))).toBe(ms);
        expect(parseRequestDate(formatBlazarTimestamp(ms))).toBe(ms - (ms % 1_000));
        expect(parseRequestDate(formatMessageDate(ms))).toBe(ms - (ms % 1_000));
        expect(parseRequestDate(formatRequestDate(ms))).toBe(wholeMinuteDown(ms));
      }),
    );
  });
});
