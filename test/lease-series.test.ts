/**
 * Recurring leases (issue 42): POST /v1/leases with `recurrence` makes one lease per occurrence,
 * tied by `series_id`, all or nothing unless `partial`; refusals name each occurrence that failed
 * with offers; GET/PUT/DELETE /v1/series/{id} from an occurrence on; the usage policy counts every
 * occurrence. Host leases, admitted in the API in one transaction: no cloud.
 */
import { ApplicationFailure } from '@temporalio/common';
import { Pool } from 'pg';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { withSeriesLock } from '../src/db/series';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, deleteAllLeases, eventually, useTestStack } from '../dev-stack/stack';

const DAY = 86_400_000;
/** Midnight UTC, `days` ahead. */
const dayAt = (days: number) => Math.floor(Date.now() / DAY) * DAY + days * DAY;
const date = (ms: number) => new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
const T0 = dayAt(10) + 9 * 3_600_000; // 09:00, ten days ahead
const HOUR = 3_600_000;
const BYDAY_NAMES = ['SU', 'MO', 'TU', 'WE', 'TH', 'FR', 'SA'];

/** The lease whose booking (a create's admission by its workflow, or a change) fails as an outage would: a fault injected into the host type's reserve. */
let failReserveOf: string | undefined;
const hostsWithFault = (pool: Pool) => {
  const plugin = physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' });
  return [{ ...plugin, reserve: (ctx: Parameters<typeof plugin.reserve>[0]) => (ctx.leaseName === failReserveOf ? Promise.reject(ApplicationFailure.nonRetryable('injected: the calendar cannot be reached', 'InjectedOutage')) : plugin.reserve(ctx)) }];
};

describe('recurring leases', () => {
  const stack = useTestStack({ withPool: hostsWithFault, env: { LK_MAX_OCCURRENCES: '12' } }, { beforeStop: async () => deleteAllLeases(admin) });
  const admin = apiClient(() => stack().url);
  const alpha = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-Roles': 'member' });
  const beta = apiClient(() => stack().url, { 'X-Project-Id': 'beta', 'X-Roles': 'member' });
  const series = (call: typeof alpha, name: string, recurrence: string, more: Record<string, unknown> = {}, start = T0, hours = 2) =>
    call('POST', '/v1/leases', { name, start_date: date(start), end_date: date(start + hours * HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence, ...more });
  const alphaLeases = async () => ((await alpha('GET', '/v1/leases')).body.leases as Array<{ name: string; start_date: string; series_id?: string }>);

  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'series-host' });
  });
  afterEach(async () => {
    failReserveOf = undefined;
    await deleteAllLeases(admin);
    await admin('DELETE', '/v1/projects/alpha/policy');
  });

  it('refuses a weekly series of 10 with one occurrence blocked, with offers for it and nothing booked; partial admits 9 and reports the 10th', async () => {
    const blocked = T0 + 3 * 7 * DAY; // the 4th occurrence
    expect((await beta('POST', '/v1/leases', { name: 'beta-blocks', start_date: date(blocked), end_date: date(blocked + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] })).status).toBe(201);

    const refused = await series(alpha, 'weekly', 'FREQ=WEEKLY;COUNT=10');
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ error_code: 409, error_name: 409, reason: 'capacity' });
    expect(refused.body.error_message).toContain('weekly-4');
    expect(refused.body.refused).toHaveLength(1);
    expect(refused.body.refused[0]).toMatchObject({ name: 'weekly-4', start_date: date(blocked), end_date: date(blocked + 2 * HOUR), reason: 'capacity' });
    expect(refused.body.refused[0].offers.length).toBeGreaterThan(0);
    expect(refused.body.refused[0].offers[0]).toMatchObject({ kind: 'later', start_date: date(blocked + HOUR) });
    expect(refused.body.offers).toEqual(refused.body.refused[0].offers);
    expect(await alphaLeases()).toEqual([]);

    const partial = await series(alpha, 'weekly', 'FREQ=WEEKLY;COUNT=10', { partial: true });
    expect(partial.status).toBe(201);
    expect(partial.body.leases).toHaveLength(9);
    expect(partial.body.leases.map((l: { name: string }) => l.name)).not.toContain('weekly-4');
    expect(partial.body.refused).toEqual([expect.objectContaining({ name: 'weekly-4', reason: 'capacity', offers: expect.arrayContaining([expect.objectContaining({ kind: 'later' })]) })]);
    const seriesId = partial.body.series.id;
    const listed = await alphaLeases();
    expect(listed).toHaveLength(9);
    expect(listed.every((l) => l.series_id === seriesId)).toBe(true);
    const shown = await alpha('GET', `/v1/series/${seriesId}`);
    expect(shown.status).toBe(200);
    expect(shown.body.series.occurrences.map((o: { start_date: string }) => o.start_date)).toEqual([0, 1, 2, 4, 5, 6, 7, 8, 9].map((w) => date(T0 + w * 7 * DAY)));
    expect(shown.body.series.refused).toEqual([expect.objectContaining({ name: 'weekly-4', start_date: date(blocked), reason: 'capacity' })]);
    // Another project's series does not exist for a member.
    expect((await beta('GET', `/v1/series/${seriesId}`)).status).toBe(404);
    expect((await beta('DELETE', `/v1/series/${seriesId}`)).status).toBe(404);
    expect((await beta('PUT', `/v1/series/${seriesId}`, { duration: 30 })).status).toBe(404);
    expect((await alphaLeases()).length).toBe(9);
    // Deleted from the 3rd on: the gap after it goes too.
    const third = shown.body.series.occurrences[2].lease_id;
    expect((await alpha('DELETE', `/v1/series/${seriesId}?from=${third}`)).status).toBe(204);
    const rest = (await alpha('GET', `/v1/series/${seriesId}`)).body.series;
    expect([rest.occurrences.map((o: { name: string }) => o.name), rest.refused]).toEqual([['weekly-1', 'weekly-2'], []]);
  });

  it('expands DAILY with COUNT and with UNTIL, and WEEKLY with BYDAY and INTERVAL', async () => {
    const daily = await series(alpha, 'daily', 'FREQ=DAILY;COUNT=3');
    expect(daily.status).toBe(201);
    expect(daily.body.leases.map((l: { name: string; start_date: string }) => [l.name, l.start_date.slice(0, 16)])).toEqual([0, 1, 2].map((d) => [`daily-${d + 1}`, date(T0 + d * DAY).replace(' ', 'T')]));
    const until = new Date(T0 + 2 * DAY).toISOString().slice(0, 10).replace(/-/g, '');
    const untilSeries = await series(alpha, 'until', `FREQ=DAILY;UNTIL=${until}`, {}, T0 + 3 * HOUR, 1);
    expect(untilSeries.body.leases.map((l: { start_date: string }) => l.start_date.slice(0, 16))).toEqual([0, 1, 2].map((d) => date(T0 + 3 * HOUR + d * DAY).replace(' ', 'T')));
    // Every other week, on Mondays and Fridays, from the first Monday on.
    const weekday = (new Date(T0).getUTCDay() + 6) % 7;
    const monday = T0 + (7 - weekday) * DAY + 8 * HOUR; // 17:00 on the Monday after
    const byDay = await series(alpha, 'byday', 'FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,FR;COUNT=4', {}, monday, 1);
    expect(byDay.status).toBe(201);
    expect(byDay.body.leases.map((l: { start_date: string }) => l.start_date.slice(0, 16))).toEqual([0, 4, 14, 18].map((d) => date(monday + d * DAY).replace(' ', 'T')));
  });

  it('allows LK_MAX_OCCURRENCES (12 here) and refuses 13 with a 400 naming the part; bad rules are 400', async () => {
    expect((await series(alpha, 'twelve', 'FREQ=DAILY;COUNT=12', {}, T0, 1)).status).toBe(201);
    const past = await series(alpha, 'thirteen', 'FREQ=DAILY;COUNT=13', {}, T0 + 12 * DAY, 1);
    expect(past.status).toBe(400);
    expect(past.body).toMatchObject({ error_code: 400, error_message: 'recurrence: COUNT: expected a whole number from 1 to 12' });
    const until = new Date(T0 + 12 * DAY + 12 * DAY).toISOString().slice(0, 10).replace(/-/g, '');
    expect((await series(alpha, 'until13', `FREQ=DAILY;UNTIL=${until}`, {}, T0 + 12 * DAY, 1)).body.error_message).toMatch(/^recurrence: UNTIL: gives more than 12 occurrences/);
    for (const [rule, part] of [['FREQ=HOURLY;COUNT=2', 'FREQ'], ['FREQ=DAILY;BYDAY=MO;COUNT=2', 'BYDAY'], ['FREQ=DAILY;INTERVAL=99;COUNT=2', 'INTERVAL'], ['FREQ=DAILY', 'COUNT']]) {
      const res = await series(alpha, 'bad', rule);
      expect([rule, res.status, res.body.error_message]).toEqual([rule, 400, expect.stringMatching(new RegExp(`^recurrence: ${part}: `))]);
    }
    expect((await series(alpha, 'bad', 'x'.repeat(201))).body.error_message).toBe('recurrence: must be at most 200 characters');
    expect((await alpha('POST', '/v1/leases', { name: 'p', start_date: date(T0), end_date: date(T0 + HOUR), partial: true })).status).toBe(400);
    expect((await alphaLeases()).map((l) => l.name).filter((n) => !n.startsWith('twelve'))).toEqual([]);
  });

  it('changes the occurrences from one on (time of day, duration), and deletes from one on', async () => {
    const created = await series(alpha, 'moving', 'FREQ=DAILY;COUNT=4');
    expect(created.status).toBe(201);
    const [, second] = created.body.leases as Array<{ id: string }>;
    const id = created.body.series.id;
    const changed = await alpha('PUT', `/v1/series/${id}`, { from: second.id, start_time: '13:30', duration: 45 });
    expect(changed.status).toBe(200);
    expect(changed.body.series.occurrences.map((o: { start_date: string; end_date: string }) => [o.start_date, o.end_date])).toEqual([
      [date(T0), date(T0 + 2 * HOUR)],
      ...[1, 2, 3].map((d) => [date(dayAt(10 + d) + 13.5 * HOUR), date(dayAt(10 + d) + 14.25 * HOUR)]),
    ]);
    // Bad changes: 400.
    expect((await alpha('PUT', `/v1/series/${id}`, { from: second.id })).status).toBe(400);
    expect((await alpha('PUT', `/v1/series/${id}`, { start_time: '25:00' })).status).toBe(400);
    expect((await alpha('PUT', `/v1/series/${id}`, { from: 'not-a-date', duration: 10 })).status).toBe(400);
    expect((await alpha('PUT', `/v1/series/${id}`, { duration: 2 * 1440 })).body.error_message).toMatch(/must not overlap/);

    const third = (changed.body.series.occurrences as Array<{ lease_id: string }>)[2].lease_id;
    expect((await alpha('DELETE', `/v1/series/${id}?from=${third}`)).status).toBe(204);
    expect((await alphaLeases()).map((l) => l.name).sort()).toEqual(['moving-1', 'moving-2']);
    expect((await alpha('DELETE', `/v1/series/${id}?from=nonsense`)).status).toBe(400);
    expect((await alpha('DELETE', `/v1/series/${id}`)).status).toBe(204);
    expect(await alphaLeases()).toEqual([]);
    expect((await alpha('GET', `/v1/series/${id}`)).status).toBe(404);
  });

  it('changes all or nothing: an occurrence blocked after the change is refused with offers and every occurrence keeps its dates', async () => {
    const created = await series(alpha, 'blocked-move', 'FREQ=DAILY;COUNT=3');
    const id = created.body.series.id;
    const blocked = dayAt(12) + 15 * HOUR; // the third day, 15:00
    expect((await beta('POST', '/v1/leases', { name: 'beta-afternoon', start_date: date(blocked), end_date: date(blocked + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] })).status).toBe(201);
    const refused = await alpha('PUT', `/v1/series/${id}`, { start_time: '15:00' });
    expect(refused.status).toBe(409);
    expect(refused.body.refused).toEqual([expect.objectContaining({ name: 'blocked-move-3', reason: 'capacity', offers: expect.any(Array) })]);
    const shown = await alpha('GET', `/v1/series/${id}`);
    expect(shown.body.series.occurrences.map((o: { start_date: string }) => o.start_date)).toEqual([0, 1, 2].map((d) => date(T0 + d * DAY)));
  });

  it('counts every occurrence in the usage policy: max_leases 5 refuses a series of 6 (nothing booked) and admits one of 5', async () => {
    expect((await admin('PUT', '/v1/projects/alpha/policy', { max_leases: 5 })).status).toBe(200);
    const six = await series(alpha, 'six', 'FREQ=DAILY;COUNT=6', {}, T0, 1);
    expect(six.status).toBe(403);
    expect(six.body).toMatchObject({ reason: 'policy:max_leases', refused: [expect.objectContaining({ name: 'six-6', reason: 'policy:max_leases' })] });
    expect(await alphaLeases()).toEqual([]);
    expect((await series(alpha, 'five', 'FREQ=DAILY;COUNT=5', {}, T0, 1)).status).toBe(201);
  });

  it('keeps a `now` start as the minute the series was counted from, for a later grow to rebuild its window from', async () => {
    const created = await alpha('POST', '/v1/leases', { name: 'from-now', start_date: 'now', end_date: date(Date.now() + 2 * HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=2', partial: true });
    expect(created.status).toBe(201);
    const { rows } = await stack().db.pool.query<{ start: string }>("SELECT template->>'start_date' AS start FROM lease_series WHERE id = $1", [created.body.series.id]);
    expect(rows[0].start).toMatch(/^\d{4}-\d\d-\d\d \d\d:\d\d$/);
    expect(created.body.series.occurrences[1].start_date).toBe(date(Date.parse(`${rows[0].start.replace(' ', 'T')}:00Z`) + DAY));
  });

  it('starts a weekly series on the first day BYDAY names when start_date is another day: its first lease has that day\'s window', async () => {
    const twoDaysOn = BYDAY_NAMES[new Date(T0 + 2 * DAY).getUTCDay()];
    const created = await series(alpha, 'offday', `FREQ=WEEKLY;BYDAY=${twoDaysOn};COUNT=2`);
    expect(created.status).toBe(201);
    const windows = (created.body.leases as Array<{ start_date: string; end_date: string }>).map((l) => [l.start_date.slice(0, 16), l.end_date.slice(0, 16)]);
    expect(windows).toEqual([2, 9].map((d) => [date(T0 + d * DAY).replace(' ', 'T'), date(T0 + d * DAY + 2 * HOUR).replace(' ', 'T')]));
  });

  it('POST /v1/policy/check with recurrence checks every occurrence: max_leases 5 refuses a series of 6, naming the rule, its figure and the occurrence', async () => {
    expect((await admin('PUT', '/v1/projects/alpha/policy', { max_leases: 5 })).status).toBe(200);
    const body = { name: 'checked', start_date: date(T0), end_date: date(T0 + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] };
    const six = await alpha('POST', '/v1/policy/check', { ...body, recurrence: 'FREQ=DAILY;COUNT=6' });
    expect(six.status).toBe(200);
    expect(six.body).toMatchObject({ decision: 'refuse', occurrences: 6, occurrence: { name: 'checked-6', start_date: date(T0 + 5 * DAY) } });
    expect(six.body.rules).toContainEqual(expect.objectContaining({ rule: 'max_leases', ok: false, limit: 5, value: 5, message: expect.stringContaining('at most 5 lease(s) not yet ended, and has 5') }));
    expect((await alpha('POST', '/v1/policy/check', { ...body, recurrence: 'FREQ=DAILY;COUNT=5' })).body).toMatchObject({ decision: 'admit', occurrences: 5 });
    expect(await alphaLeases()).toEqual([]);
  });

  it('puts a change back when an occurrence fails halfway with an outage (503), partial or not', async () => {
    const created = await series(alpha, 'failing', 'FREQ=DAILY;COUNT=3');
    expect(created.status).toBe(201);
    failReserveOf = 'failing-2';
    for (const partial of [false, true]) {
      const failed = await alpha('PUT', `/v1/series/${created.body.series.id}`, { start_time: '13:00', partial });
      expect([partial, failed.status, failed.body.compensation_failed]).toEqual([partial, 503, undefined]);
      const shown = await alpha('GET', `/v1/series/${created.body.series.id}`);
      expect(shown.body.series.occurrences.map((o: { start_date: string }) => o.start_date)).toEqual([0, 1, 2].map((d) => date(T0 + d * DAY)));
    }
  });

  it('grows a series (count): all or nothing refuses with offers per refused occurrence and changes nothing; partial admits what fits and records the new rule', async () => {
    const created = await series(alpha, 'growing', 'FREQ=DAILY;COUNT=3');
    expect(created.status).toBe(201);
    const id = created.body.series.id;
    const blocked = T0 + 4 * DAY; // the 5th occurrence's day
    expect((await beta('POST', '/v1/leases', { name: 'beta-blocks-5th', start_date: date(blocked), end_date: date(blocked + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] })).status).toBe(201);
    const refused = await alpha('PUT', `/v1/series/${id}`, { count: 6 });
    expect(refused.status).toBe(409);
    expect(refused.body.error_message).toMatch(/^The series was not changed: occurrence growing-5/);
    expect(refused.body.refused).toEqual([expect.objectContaining({ name: 'growing-5', start_date: date(blocked), reason: 'capacity', offers: expect.arrayContaining([expect.objectContaining({ kind: 'later' })]) })]);
    const unchanged = (await alpha('GET', `/v1/series/${id}`)).body.series;
    expect([unchanged.recurrence, unchanged.occurrences.map((o: { name: string }) => o.name), unchanged.refused]).toEqual(['FREQ=DAILY;COUNT=3', ['growing-1', 'growing-2', 'growing-3'], []]);

    const partial = await alpha('PUT', `/v1/series/${id}`, { count: 6, partial: true });
    expect(partial.status).toBe(200);
    expect(partial.body.refused).toEqual([expect.objectContaining({ name: 'growing-5', reason: 'capacity' })]);
    const grown = (await alpha('GET', `/v1/series/${id}`)).body.series;
    expect(grown.recurrence).toBe('FREQ=DAILY;COUNT=6');
    expect(grown.occurrences.map((o: { name: string; start_date: string }) => [o.name, o.start_date])).toEqual([0, 1, 2, 3, 5].map((d) => [`growing-${d + 1}`, date(T0 + d * DAY)]));
    expect(grown.refused).toEqual([expect.objectContaining({ name: 'growing-5', start_date: date(blocked), reason: 'capacity' })]);
    expect((await alphaLeases()).filter((l) => l.series_id === id)).toHaveLength(5);
  });

  it('grows a series with the time of day and duration its last occurrence has, and counts the new occurrences in the usage policy (max_leases)', async () => {
    const created = await series(alpha, 'counted', 'FREQ=DAILY;COUNT=3', {}, T0, 1);
    const id = created.body.series.id;
    expect((await alpha('PUT', `/v1/series/${id}`, { start_time: '14:00', duration: 30 })).status).toBe(200);
    expect((await admin('PUT', '/v1/projects/alpha/policy', { max_leases: 5 })).status).toBe(200);
    const six = await alpha('PUT', `/v1/series/${id}`, { count: 6 });
    expect(six.status).toBe(403);
    expect(six.body).toMatchObject({ reason: 'policy:max_leases', refused: [expect.objectContaining({ name: 'counted-6', reason: 'policy:max_leases' })] });
    expect((await alphaLeases()).length).toBe(3);
    const five = await alpha('PUT', `/v1/series/${id}`, { count: 5 });
    expect(five.status).toBe(200);
    expect(five.body.series.occurrences.map((o: { start_date: string; end_date: string }) => [o.start_date, o.end_date])).toEqual(
      [0, 1, 2, 3, 4].map((d) => [date(dayAt(10 + d) + 14 * HOUR), date(dayAt(10 + d) + 14.5 * HOUR)]),
    );
  });

  it('grows a series created with before_end_date after its duration was shortened: the new occurrences take the last one\'s before-end, or the default where it no longer fits', async () => {
    const created = await series(alpha, 'early-notice', 'FREQ=DAILY;COUNT=2', { before_end_date: date(T0 + HOUR) });
    expect(created.status).toBe(201);
    const id = created.body.series.id;
    expect((await alpha('PUT', `/v1/series/${id}`, { duration: 30 })).status).toBe(200);
    const grown = await alpha('PUT', `/v1/series/${id}`, { count: 3 });
    expect([grown.status, grown.body.error_message]).toEqual([200, undefined]);
    const third = (await alphaLeases()).find((l) => l.name === 'early-notice-3') as { start_date: string; end_date: string; before_end_date?: string } | undefined;
    expect([third?.start_date.slice(0, 16), third?.end_date.slice(0, 16)]).toEqual([date(T0 + 2 * DAY).replace(' ', 'T'), date(T0 + 2 * DAY + 30 * 60_000).replace(' ', 'T')]);
  });

  it('grows a series with the caller\'s rights and in the caller\'s name: a member\'s grow of an admin\'s series asks no admin-only end policy, and its new occurrences are the member\'s', async () => {
    const alphaAdmin = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-User-Id': 'alpha-admin', 'X-Roles': 'admin' });
    const alphaMember = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-User-Id': 'alpha-member', 'X-Roles': 'member' });
    const owned = await series(alphaAdmin, 'admins', 'FREQ=DAILY;COUNT=1');
    expect(owned.status).toBe(201);
    const grown = await alphaMember('PUT', `/v1/series/${owned.body.series.id}`, { count: 2 });
    expect(grown.status).toBe(200);
    const users = (await alphaLeases() as Array<{ name: string; user_id?: string }>).filter((l) => l.name.startsWith('admins-')).map((l) => [l.name, l.user_id]);
    expect(users.sort()).toEqual([['admins-1', 'alpha-admin'], ['admins-2', 'alpha-member']]);

    const start = T0 + 30 * DAY;
    const releasing = await alphaAdmin('POST', '/v1/leases', { name: 'admins-release', start_date: date(start), end_date: date(start + HOUR), reservations: [hostReservation({ min: 1, max: 1, on_end: 'release' })], recurrence: 'FREQ=DAILY;COUNT=1' });
    expect(releasing.status).toBe(201);
    const refused = await alphaMember('PUT', `/v1/series/${releasing.body.series.id}`, { count: 2 });
    expect([refused.status, refused.body.error_message]).toEqual([403, expect.stringContaining('on_end "release"')]);
    expect((await alphaLeases()).map((l) => l.name).filter((n) => n.startsWith('admins-release'))).toEqual(['admins-release-1']);
  });

  it('shrinks a series (count, until): the occurrences past the new end are deleted, one started is never touched and is named in the answer; LK_MAX_OCCURRENCES bounds the total', async () => {
    const created = await series(alpha, 'shrinking', 'FREQ=DAILY;COUNT=5', {}, T0, 1);
    const id = created.body.series.id;
    const fewer = await alpha('PUT', `/v1/series/${id}`, { count: 3 });
    expect(fewer.status).toBe(200);
    expect([fewer.body.series.recurrence, fewer.body.series.occurrences.map((o: { name: string }) => o.name), fewer.body.untouched]).toEqual(['FREQ=DAILY;COUNT=3', ['shrinking-1', 'shrinking-2', 'shrinking-3'], undefined]);
    expect((await alphaLeases()).map((l) => l.name).sort()).toEqual(['shrinking-1', 'shrinking-2', 'shrinking-3']);

    // The third as if it had started (its row only: a change must leave it alone whatever its workflow holds).
    const third = (fewer.body.series.occurrences as Array<{ lease_id: string }>)[2].lease_id;
    const setStatus = (status: string) => stack().db.pool.query(`UPDATE leases SET status = $2, document = jsonb_set(document, '{status}', to_jsonb($2::text)) WHERE id = $1`, [third, status]);
    await setStatus('ACTIVE');
    try {
      const until = await alpha('PUT', `/v1/series/${id}`, { until: date(T0 + DAY) });
      expect(until.status).toBe(200);
      expect(until.body.series.recurrence).toBe(`FREQ=DAILY;UNTIL=${new Date(T0 + DAY).toISOString().slice(0, 19).replace(/[-:]/g, '')}Z`);
      expect(until.body.untouched).toEqual([expect.objectContaining({ lease_id: third, name: 'shrinking-3', status: 'ACTIVE' })]);
      expect((await alphaLeases()).map((l) => l.name).sort()).toEqual(['shrinking-1', 'shrinking-2', 'shrinking-3']);
    } finally {
      await setStatus('PENDING');
    }

    const past = await alpha('PUT', `/v1/series/${id}`, { count: 13 });
    expect([past.status, past.body.error_message]).toEqual([400, 'count: expected a whole number from 1 to 12']);
    const farUntil = await alpha('PUT', `/v1/series/${id}`, { until: date(T0 + 20 * DAY) });
    expect([farUntil.status, farUntil.body.error_message]).toEqual([400, expect.stringMatching(/^until: gives more than 12 occurrences/)]);
    for (const bad of [{ count: 4, until: date(T0 + 5 * DAY) }, { count: 4, from: third }, { count: 4, duration: 30 }, { until: 'soon' }, { count: 0 }]) {
      expect([bad, (await alpha('PUT', `/v1/series/${id}`, bad)).status]).toEqual([bad, 400]);
    }
    expect((await alpha('GET', `/v1/series/${id}`)).body.series.recurrence).toMatch(/^FREQ=DAILY;UNTIL=/);
  });

  it('bounds `until` by each occurrence\'s own start: after a move to 10:00, an until at 09:30 on a day leaves that day no occurrence, shrinking or growing', async () => {
    const created = await series(alpha, 'late-until', 'FREQ=DAILY;COUNT=3', {}, T0, 1);
    const id = created.body.series.id;
    expect((await alpha('PUT', `/v1/series/${id}`, { start_time: '10:00' })).status).toBe(200);
    const names = (answer: { body: { series: { occurrences: Array<{ name: string; start_date: string }> } } }) => answer.body.series.occurrences.map((o) => [o.name, o.start_date]);
    const fewer = await alpha('PUT', `/v1/series/${id}`, { until: date(dayAt(12) + 9.5 * HOUR) });
    expect([fewer.status, names(fewer)]).toEqual([200, [0, 1].map((d) => [`late-until-${d + 1}`, date(dayAt(10 + d) + 10 * HOUR)])]);
    const more = await alpha('PUT', `/v1/series/${id}`, { until: date(dayAt(13) + 9.5 * HOUR) });
    expect([more.status, names(more)]).toEqual([200, [0, 1, 2].map((d) => [`late-until-${d + 1}`, date(dayAt(10 + d) + 10 * HOUR)])]);
  });

  it('reads each occurrence again right before a shrink deletes it: one that started while those before it were deleted is kept and named in `untouched`', async () => {
    const created = await series(alpha, 'late-start', 'FREQ=DAILY;COUNT=5', {}, T0, 1);
    expect(created.status).toBe(201);
    const [, , , fourth, fifth] = created.body.leases as Array<{ id: string }>;
    const pool = stack().db.pool;
    const setStatus = (status: string) => pool.query(`UPDATE leases SET status = $2, document = jsonb_set(document, '{status}', to_jsonb($2::text)) WHERE id = $1`, [fifth.id, status]);
    // The fifth "starts" (its row only, as above) when the fourth's delete is recorded, after the series was read.
    await pool.query(`CREATE OR REPLACE FUNCTION test_start_fifth() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN UPDATE leases SET status = 'ACTIVE', document = jsonb_set(document, '{status}', '"ACTIVE"') WHERE id = '${fifth.id}'; RETURN NULL; END $$`);
    await pool.query(`CREATE TRIGGER test_start_fifth AFTER UPDATE OF deleted_at ON leases FOR EACH ROW WHEN (NEW.id = '${fourth.id}' AND NEW.deleted_at IS NOT NULL AND OLD.deleted_at IS NULL) EXECUTE FUNCTION test_start_fifth()`);
    try {
      const fewer = await alpha('PUT', `/v1/series/${created.body.series.id}`, { count: 3 });
      expect([fewer.status, fewer.body.untouched]).toEqual([200, [expect.objectContaining({ lease_id: fifth.id, name: 'late-start-5', status: 'ACTIVE' })]]);
      expect((await alphaLeases()).map((l) => l.name).sort()).toEqual(['late-start-1', 'late-start-2', 'late-start-3', 'late-start-5']);
    } finally {
      await pool.query('DROP TRIGGER IF EXISTS test_start_fifth ON leases');
      await setStatus('PENDING');
    }
  });

  it('answers a series create retried with its Idempotency-Key with the series made first, refuses the key with another body, and deleted: 410', async () => {
    const key = { 'Idempotency-Key': `series-${T0}-retry` };
    const third = T0 + 2 * DAY;
    expect((await beta('POST', '/v1/leases', { name: 'beta-third', start_date: date(third), end_date: date(third + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] })).status).toBe(201);
    const body = { name: 'keyed', start_date: date(T0), end_date: date(T0 + HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=3', partial: true };
    const first = await alpha('POST', '/v1/leases', body, key);
    expect(first.status).toBe(201);
    expect(first.body.refused).toEqual([expect.objectContaining({ name: 'keyed-3', reason: 'capacity', offers: expect.arrayContaining([expect.anything()]) })]);
    const retry = await alpha('POST', '/v1/leases', body, key);
    expect(retry.status).toBe(201);
    const gist = (answer: typeof first) => ({
      series: answer.body.series.id,
      lease: answer.body.lease.id,
      leases: answer.body.leases.map((l: { id: string }) => l.id),
      refused: answer.body.refused.map((r: { name: string; reason: string; error_message: string; offers: unknown[] }) => [r.name, r.reason, r.error_message, r.offers.length > 0]),
    });
    expect(gist(retry)).toEqual(gist(first));
    expect((await alphaLeases()).map((l) => l.name).sort()).toEqual(['keyed-1', 'keyed-2']);
    const other = await alpha('POST', '/v1/leases', { ...body, recurrence: 'FREQ=DAILY;COUNT=2' }, key);
    expect(other).toEqual({ status: 409, body: { error_code: 409, error_name: 409, error_message: 'this Idempotency-Key was already used for a different request' } });
    // Another project's key of the same text is its own.
    expect((await beta('POST', '/v1/leases', { ...body, start_date: date(T0 + 5 * DAY), end_date: date(T0 + 5 * DAY + HOUR), partial: false }, key)).status).toBe(201);
    expect((await alpha('DELETE', `/v1/series/${first.body.series.id}`)).status).toBe(204);
    expect((await alpha('POST', '/v1/leases', body, key)).status).toBe(410);
    expect(await alphaLeases()).toEqual([]);
  });

  it('refuses an Idempotency-Key used for a lease create on a series create and the other way round (409), sent one after the other or together', async () => {
    const reservations = [hostReservation({ min: 1, max: 1 })];
    const lease = (days: number) => ({ name: `keyed-lease-${days}`, start_date: date(T0 + days * DAY), end_date: date(T0 + days * DAY + HOUR), reservations });
    const series = (days: number) => ({ ...lease(days), name: `keyed-series-${days}`, recurrence: 'FREQ=DAILY;COUNT=2' });
    const key = (name: string) => ({ 'Idempotency-Key': `${T0}-${name}` });
    const usedElsewhere = { status: 409, body: { error_code: 409, error_name: 409, error_message: 'this Idempotency-Key was already used for a different request' } };
    expect((await alpha('POST', '/v1/leases', lease(30), key('lease-first'))).status).toBe(201);
    expect(await alpha('POST', '/v1/leases', series(32), key('lease-first'))).toEqual(usedElsewhere);
    expect((await alpha('POST', '/v1/leases', series(34), key('series-first'))).status).toBe(201);
    expect(await alpha('POST', '/v1/leases', lease(36), key('series-first'))).toEqual(usedElsewhere);
    const together = await Promise.all([alpha('POST', '/v1/leases', lease(38), key('together')), alpha('POST', '/v1/leases', series(40), key('together'))]);
    expect(together.map((a) => a.status).sort()).toEqual([201, 409]);
    const made = (await alphaLeases()).map((l) => l.name).filter((n) => /-(38|40)/.test(n));
    expect(made).toEqual(together[0].status === 201 ? ['keyed-lease-38'] : ['keyed-series-40-1', 'keyed-series-40-2']);
    expect((await alphaLeases()).map((l) => l.name).filter((n) => !/-(38|40)/.test(n)).sort()).toEqual(['keyed-lease-30', 'keyed-series-34-1', 'keyed-series-34-2']);
  });

  it('makes one series for two concurrent sends with one Idempotency-Key, and answers both with it', async () => {
    const key = { 'Idempotency-Key': `series-${T0}-concurrent` };
    const body = { name: 'twice', start_date: date(T0), end_date: date(T0 + HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=3' };
    const answers = await Promise.all([alpha('POST', '/v1/leases', body, key), alpha('POST', '/v1/leases', body, key)]);
    expect(answers.map((a) => a.status)).toEqual([201, 201]);
    expect(answers[1].body.series.id).toBe(answers[0].body.series.id);
    expect(answers[1].body.leases.map((l: { id: string }) => l.id)).toEqual(answers[0].body.leases.map((l: { id: string }) => l.id));
    expect((await alphaLeases()).map((l) => l.name).sort()).toEqual(['twice-1', 'twice-2', 'twice-3']);
    const { rows } = await stack().db.pool.query<{ n: number }>("SELECT count(*)::int AS n FROM lease_series WHERE name = 'twice' AND project_id = 'alpha'");
    expect(rows[0].n).toBe(1);
  });

  it('runs concurrent changes of one series one after the other: the second sees the first and refuses an overlap', async () => {
    const created = await series(alpha, 'racing', 'FREQ=DAILY;COUNT=2');
    const id = created.body.series.id;
    const [, second] = created.body.leases as Array<{ id: string }>;
    const pool = stack().db.pool;
    let release!: () => void;
    let holding!: () => void;
    const locked = new Promise<void>((resolve) => (holding = resolve));
    // Held as another project would: alpha's changes may hold locks of their own meanwhile (a quarter of the pool's).
    const held = withSeriesLock(pool, { seriesId: id, projectId: 'test-holder' }, 5_000, () => new Promise<void>((resolve) => ((release = resolve), holding())));
    // The test holds the series before the changes come: else one of them could take it first.
    await locked;
    // Each change alone keeps the occurrences apart (the second at midnight; 16 hours each); both together do not.
    const changes = [alpha('PUT', `/v1/series/${id}`, { from: second.id, start_time: '00:00' }), alpha('PUT', `/v1/series/${id}`, { duration: 16 * 60 })];
    // A change that found the series locked: its connection's last query tried the lock (as did the
    // test's own connection, which holds it: so at least two).
    const tried = "SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE 'SELECT pg_try_advisory_lock(hashtext(''leasekeeper:series'')%'";
    // Asked on a connection of its own: the pool hands its last released connection out first, and this query would hide a change's try.
    const watcher = new Pool({ connectionString: stack().db.url, max: 1 });
    try {
      await eventually(async () => ((await watcher.query<{ n: number }>(tried)).rows[0].n >= 2 ? true : undefined), 15_000, 50, () => 'the changes did not wait on the series');
    } finally {
      await watcher.end();
    }
    release();
    await held;
    const answers = await Promise.all(changes);
    expect(answers.map((a) => a.status).sort()).toEqual([200, 400]);
    expect(answers.find((a) => a.status === 400)!.body.error_message).toMatch(/must not overlap/);
    const [a, b] = (await alpha('GET', `/v1/series/${id}`)).body.series.occurrences as Array<{ start_date: string; end_date: string }>;
    expect(a.end_date <= b.start_date).toBe(true);
  });

  it('lets one project hold series locks on a quarter of the pool at most: its concurrent series operations leave another project\'s request a connection', async () => {
    const small = new Pool({ connectionString: stack().db.url, max: 2 });
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let working = 0;
    // Each holds its series's lock, then takes another connection for its work, as a create's admission does.
    const operations = [1, 2, 3, 4].map((i) =>
      withSeriesLock(small, { seriesId: `starving-${i}`, projectId: 'alpha' }, 120_000, async () => {
        working++;
        await small.query('SELECT 1');
        await released;
      }),
    );
    await eventually(() => Promise.resolve(working >= 1 ? true : undefined), 15_000, 20, () => 'no series operation got the lock');
    let otherAnswered = false;
    const other = small.query("SELECT 'beta' AS project").then(() => (otherAnswered = true));
    await eventually(() => Promise.resolve(otherAnswered ? true : undefined), 10_000, 20, () => 'another project\'s query got no connection');
    expect(working).toBe(1); // the others wait for the one alpha holds, on no connection
    release();
    expect((await Promise.all(operations)).map((o) => o.ran)).toEqual([true, true, true, true]);
    await other;
    await small.end();
  });
});

describe('recurring leases admitted by their workflows (LK_ADMISSION=workflow): the saga', () => {
  const stack = useTestStack({ withPool: hostsWithFault, env: { LK_ADMISSION: 'workflow' } }, { beforeStop: async () => deleteAllLeases(admin) });
  const admin = apiClient(() => stack().url);
  const alpha = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-Roles': 'member' });
  const beta = apiClient(() => stack().url, { 'X-Project-Id': 'beta', 'X-Roles': 'member' });

  beforeAll(async () => {
    await insertHost(stack().db.pool, { name: 'saga-host' });
  });

  it('deletes the occurrences admitted before a refusal (all or nothing), and keeps them with partial', async () => {
    const third = T0 + 2 * DAY;
    expect((await beta('POST', '/v1/leases', { name: 'beta-third', start_date: date(third), end_date: date(third + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] })).status).toBe(201);
    const body = { name: 'saga', start_date: date(T0), end_date: date(T0 + HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=3' };
    const refused = await alpha('POST', '/v1/leases', body);
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ reason: 'capacity', refused: [expect.objectContaining({ name: 'saga-3', offers: expect.any(Array) })] });
    expect(refused.body.compensation_failed).toBeUndefined();
    expect((await alpha('GET', '/v1/leases')).body.leases).toEqual([]); // saga-1 and saga-2 were admitted, then deleted
    const partial = await alpha('POST', '/v1/leases', { ...body, partial: true });
    expect(partial.status).toBe(201);
    expect(partial.body.leases.map((l: { name: string }) => l.name)).toEqual(['saga-1', 'saga-2']);
    expect((await alpha('GET', `/v1/series/${partial.body.series.id}`)).body.series.refused).toEqual([expect.objectContaining({ name: 'saga-3', reason: 'capacity' })]);
  });

  it('grows a series through the workflows all or nothing: the new occurrences admitted before a refusal are deleted again', async () => {
    const start = T0 + 40 * DAY;
    const body = { name: 'saga-grow', start_date: date(start), end_date: date(start + HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=2' };
    const created = await alpha('POST', '/v1/leases', body);
    expect(created.status).toBe(201);
    const fourth = start + 3 * DAY;
    expect((await beta('POST', '/v1/leases', { name: 'beta-fourth', start_date: date(fourth), end_date: date(fourth + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] })).status).toBe(201);
    const refused = await alpha('PUT', `/v1/series/${created.body.series.id}`, { count: 4 });
    expect(refused.status).toBe(409);
    expect(refused.body).toMatchObject({ reason: 'capacity', refused: [expect.objectContaining({ name: 'saga-grow-4' })] });
    expect(refused.body.compensation_failed).toBeUndefined();
    const shown = (await alpha('GET', `/v1/series/${created.body.series.id}`)).body.series;
    expect([shown.recurrence, shown.occurrences.map((o: { name: string }) => o.name)]).toEqual(['FREQ=DAILY;COUNT=2', ['saga-grow-1', 'saga-grow-2']]);
    expect((await alpha('GET', '/v1/leases')).body.leases.map((l: { name: string }) => l.name).filter((n: string) => n.startsWith('saga-grow')).sort()).toEqual(['saga-grow-1', 'saga-grow-2']);
  });

  /** The series rows named `kept-…` cannot be removed while `use` runs (as if the API stopped before removing them). */
  const withSeriesRowsKept = async (use: () => Promise<void>) => {
    const pool = stack().db.pool;
    await pool.query("CREATE OR REPLACE FUNCTION test_keep_series_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'test: this series row is kept'; END $$");
    await pool.query("CREATE TRIGGER test_keep_series_row BEFORE DELETE ON lease_series FOR EACH ROW WHEN (OLD.name LIKE 'kept-%') EXECUTE FUNCTION test_keep_series_row()");
    try {
      await use();
    } finally {
      await pool.query('DROP TRIGGER IF EXISTS test_keep_series_row ON lease_series');
    }
  };

  it('answers the retry of a refused keyed create whose series row stayed behind with the refusal again, never a 201', async () => {
    const start = T0 + 60 * DAY;
    const third = start + 2 * DAY;
    expect((await beta('POST', '/v1/leases', { name: 'beta-kept', start_date: date(third), end_date: date(third + HOUR), reservations: [hostReservation({ min: 1, max: 1 })] })).status).toBe(201);
    const body = { name: 'kept-refused', start_date: date(start), end_date: date(start + HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=3' };
    const key = { 'Idempotency-Key': `saga-${T0}-kept-refused` };
    await withSeriesRowsKept(async () => {
      const refused = await alpha('POST', '/v1/leases', body, key);
      expect([refused.status, refused.body.reason]).toEqual([409, 'capacity']);
      const retry = await alpha('POST', '/v1/leases', body, key);
      expect([retry.status, retry.body.reason, retry.body.refused?.map((r: { name: string }) => r.name)]).toEqual([409, 'capacity', ['kept-refused-3']]);
    });
    expect((await alpha('GET', '/v1/leases')).body.leases.filter((l: { name: string }) => l.name.startsWith('kept-refused'))).toEqual([]);
  });

  it('creates the series again when a keyed create was cut short (its row left behind): the retry deletes what the first try admitted, and answers the series made', async () => {
    const start = T0 + 70 * DAY;
    const body = { name: 'kept-cut', start_date: date(start), end_date: date(start + HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=3' };
    const key = { 'Idempotency-Key': `saga-${T0}-kept-cut` };
    failReserveOf = 'kept-cut-2';
    await withSeriesRowsKept(async () => {
      expect((await alpha('POST', '/v1/leases', body, key)).status).toBe(503);
    });
    failReserveOf = undefined;
    const retry = await alpha('POST', '/v1/leases', body, key);
    expect([retry.status, retry.body.leases?.map((l: { name: string }) => l.name)]).toEqual([201, ['kept-cut-1', 'kept-cut-2', 'kept-cut-3']]);
    const shown = await alpha('GET', `/v1/series/${retry.body.series.id}`);
    expect(shown.body.series.occurrences.map((o: { name: string }) => o.name)).toEqual(['kept-cut-1', 'kept-cut-2', 'kept-cut-3']);
    expect((await alpha('POST', '/v1/leases', body, key)).body.series.id).toBe(retry.body.series.id);
  });

  it('makes no series when an occurrence fails with an outage rather than a refusal: the admitted ones are deleted, partial or not', async () => {
    failReserveOf = 'broken-2';
    const body = { name: 'broken', start_date: date(T0 + 20 * DAY), end_date: date(T0 + 20 * DAY + HOUR), reservations: [hostReservation({ min: 1, max: 1 })], recurrence: 'FREQ=DAILY;COUNT=3' };
    for (const partial of [false, true]) {
      const failed = await alpha('POST', '/v1/leases', { ...body, partial });
      expect([partial, failed.status, failed.body.compensation_failed]).toEqual([partial, 503, undefined]);
      expect((await alpha('GET', '/v1/leases')).body.leases.filter((l: { name: string }) => l.name.startsWith('broken'))).toEqual([]);
    }
    failReserveOf = undefined;
  });
});
