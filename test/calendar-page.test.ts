/**
 * The calendar page in a real browser (Debian's Chromium, headless): seeded leases are bars where
 * their dates say, another project's lease shows without its name, a lease lists its possible
 * extensions and a refused extension offers the ends possible, "find a slot" lists the API's offers
 * and books one that then appears, holds one (a countdown; the hold becomes the lease) or releases
 * it, and shows a refusal's fresh offers; preemptible bookings are hatched, a preempted lease marked at
 * its cut, lent time hatched over its lender's bar under its borrowers; booked network segments drawn
 * in the Network calendar below the hosts. Screenshots of each page go to
 * test-artifacts/calendar-page/; axe-core finds no serious accessibility violation.
 */
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { networkSegmentPlugin } from '../src/resources/network-segment';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { insertNetworkSegment } from '../src/db/network-segments';
import { AXE_SOURCE, artefactDir, launchChromium } from '../dev-stack/fixtures/browser';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { lenderRowsOf } from '../src/db/host-allocations';
import { insertLendings } from '../src/db/host-lendings';
import { inTransaction } from '../src/db/transaction';
import { recordPowerState, saveHostPowerSettings } from '../src/db/host-power';
import { insertQuantityBookingRow } from '../dev-stack/fixtures/lease-rows';
import { apiClient, eventually, useTestStack } from '../dev-stack/stack';

const DAY = 86_400_000;
const HOUR = 3_600_000;
/** Two days after today (UTC): inside the week the page shows first (from yesterday on). */
const day = Math.floor(Date.now() / DAY) * DAY + 2 * DAY;
const at = (hour: number) => new Date(day + hour * HOUR).toISOString().slice(0, 16).replace('T', ' ');

/** The part of a browser's canvas element this test reads (the root tsconfig has no DOM types). */
interface CanvasLike {
  getContext(kind: '2d'): { getImageData(x: number, y: number, w: number, h: number): { data: Uint8ClampedArray } } | null;
}

/** Lease status colours of the page (web/src/paint.ts). */
const PENDING = [0x3d, 0x6f, 0xc4];
const RESERVED = [0xb4, 0xbc, 0xc6];
/** A held booking's fill and stripes (web/src/paint.ts HELD_COLOR). */
const HELD_FILL = [0xdb, 0xe5, 0xf6];

/** The page's timelines, by their test ids: hosts, network segments, servers and bandwidth. */
type Timeline = 'gantt' | 'network-gantt' | 'capacity';

/** What the page shows of an offer (POST /v1/offers), and its words for the kinds (web/src/find-slot.tsx KIND_WORDS). */
interface Offer {
  id: string;
  kind: 'exact' | 'later' | 'shorter' | 'fewer';
  start_date: string;
  end_date: string;
  reason: string;
}
const KIND_WORDS: Record<Offer['kind'], string> = { exact: 'as asked', later: 'later', shorter: 'shorter', fewer: 'fewer' };

describe('the calendar page in Chromium', () => {
  const stack = useTestStack({
    withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }), networkSegmentPlugin({ pool, cloud: 'calendar-only' })],
  });
  const alpha = apiClient(() => stack().url, { 'X-Project-Id': 'alpha', 'X-Roles': 'member' });
  const beta = apiClient(() => stack().url, { 'X-Project-Id': 'beta', 'X-Roles': 'member' });
  const admin = apiClient(() => stack().url);
  const artefacts = artefactDir('calendar-page');
  const hosts: string[] = ['gpu-1', 'gpu-2', 'cpu-1', 'cpu-2', 'cpu-3'];
  let browser: Browser;
  let page: Page;
  const leases: Record<string, string> = {};
  const calendarAnswers: string[] = [];
  /** The page's uncaught errors and console errors: none expected. */
  const pageErrors: string[] = [];

  beforeAll(async () => {
    for (const name of hosts) await insertHost(stack().db.pool, { name, capabilities: { gpu: name.startsWith('gpu') ? 'a100' : 'none' } });
    const gpu = (fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: '["==", "$gpu", "a100"]', ...fields });
    const book = async (who: typeof alpha, name: string, start: number, end: number, reservation: Record<string, unknown>) => {
      const res = await who('POST', '/v1/leases', { name, start_date: at(start), end_date: at(end), reservations: [reservation] });
      expect(res.status).toBe(201);
      leases[name] = res.body.lease.id;
    };
    await book(alpha, 'alpha-gpu-run', 10, 12, gpu()); // gpu-1 (no random choice: the first free host)
    await book(beta, 'beta-secret-experiment', 11, 15, blazarHostReservation({ min: 2, max: 2, resource_properties: '["==", "$gpu", "none"]' }));
    await book(alpha, 'alpha-to-extend', 13, 14, gpu());
    await book(beta, 'beta-holds-gpus', 16, 18, gpu({ min: 2, max: 2 }));
    // A compute provider with 16 vCPUs: 8 booked by alpha's lease from 10:00 to 12:00, 4 by beta's from 11:00 to 15:00 (their windows).
    await stack().db.pool.query(`INSERT INTO capacity_providers (uuid, name, host, kind, capacity) VALUES ('p-1', 'cpu-3', 'cpu-3', 'compute', '{"VCPU": 16}')`);
    for (const [name, projectId, vcpus, startH, endH] of [['alpha-gpu-run', 'alpha', 8, 10, 12], ['beta-secret-experiment', 'beta', 4, 11, 15]] as const) {
      await insertQuantityBookingRow(stack().db.pool, { providerUuid: 'p-1', leaseId: leases[name], projectId, amounts: { VCPU: vcpus }, startMs: day + startH * HOUR, endMs: day + endH * HOUR });
    }
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1, bypassCSP: true }); // bypassCSP: only so that axe-core can be injected
    page = await context.newPage();
    page.on('response', (response) => {
      if (response.url().includes('/v1/calendar?')) void response.text().then((text) => calendarAnswers.push(text));
    });
    page.on('dialog', (dialog) => void dialog.accept());
    page.on('pageerror', (err) => pageErrors.push(String(err)));
    page.on('console', (message) => {
      // A refusal the page shows (e.g. the 409 of an extension) is logged by the browser too: that is no error of the page.
      if (message.type() === 'error' && !/^Failed to load resource: the server responded with a status of 4\d\d/.test(message.text())) pageErrors.push(message.text());
    });
    page.setDefaultTimeout(15_000);
  }, 60_000);

  afterEach(() => {
    expect(pageErrors).toEqual([]);
  });

  afterAll(async () => {
    await browser?.close();
    console.log(`calendar page screenshots: ${artefacts}`);
  });

  /**
   * The Gantt's geometry, from its data attributes: where an instant on a host's row is, in canvas
   * pixels; near the top of the row's bar, above the lease name a wide bar is labelled with.
   */
  const pointOf = (hostName: string, ms: number) => pointIn('gantt', hosts.indexOf(hostName), ms, -7);

  /** Where an instant on a row of a timeline (gantt, capacity) is, in canvas pixels: the row's middle, or `dy` from it. */
  async function pointIn(timeline: Timeline, row: number, ms: number, dy = 0, on: Page = page): Promise<{ x: number; y: number }> {
    const gantt = on.getByTestId(timeline);
    const attr = async (name: string) => Number(await gantt.getAttribute(`data-${name}`));
    const [start, end, labelWidth, axisHeight, rowHeight] = await Promise.all(['view-start', 'view-end', 'label-width', 'axis-height', 'row-height'].map(attr));
    const width = (await gantt.boundingBox())!.width;
    return { x: labelWidth + ((ms - start) / (end - start)) * (width - labelWidth), y: axisHeight + row * rowHeight + rowHeight / 2 + dy };
  }

  async function pixel(point: { x: number; y: number }, timeline: Timeline = 'gantt', on: Page = page): Promise<number[]> {
    return on.getByTestId(timeline).evaluate<number[], { x: number; y: number }, CanvasLike>((canvas, p) => [...canvas.getContext('2d')!.getImageData(Math.round(p.x), Math.round(p.y), 1, 1).data.slice(0, 3)], point);
  }

  async function hover(point: { x: number; y: number }, timeline: Timeline = 'gantt', on: Page = page): Promise<string> {
    const box = (await on.getByTestId(timeline).boundingBox())!;
    await on.mouse.move(box.x + point.x, box.y + point.y);
    return (await on.locator('.status').textContent()) ?? '';
  }

  /** 24 pixels of the Gantt across from a point, as "r,g,b" (a stripe or a grid line may sit on the point itself). */
  const across = (p: { x: number; y: number }, on: Page = page) =>
    on.getByTestId('gantt').evaluate<string[], { x: number; y: number }, CanvasLike>((canvas, point) => {
      const data = canvas.getContext('2d')!.getImageData(Math.round(point.x), Math.round(point.y), 24, 1).data;
      return Array.from({ length: 24 }, (_, i) => [...data.slice(i * 4, i * 4 + 3)].join());
    }, p);

  /** A browser context of its own, signed in (noauth) as the project, an admin or not, before its first page loads. */
  async function signedInContext(projectId: string, isAdmin: boolean) {
    const context = await browser.newContext({ viewport: { width: 1400, height: 1000 }, deviceScaleFactor: 1 });
    await context.addInitScript(
      (credentials) => (globalThis as unknown as { sessionStorage: { setItem(k: string, v: string): void } }).sessionStorage.setItem('leasekeeper.credentials', JSON.stringify(credentials)),
      { kind: 'noauth', projectId, admin: isAdmin },
    );
    return context;
  }

  async function axeViolations(): Promise<Array<{ id: string; impact: string; help: string }>> {
    await page.addScriptTag({ content: AXE_SOURCE() });
    const result = await page.evaluate(async () => {
      const axe = (globalThis as unknown as { axe: { run(): Promise<{ violations: Array<{ id: string; impact: string; help: string }> }> } }).axe;
      return (await axe.run()).violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help }));
    });
    return result.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  }

  it('signs in as a project and draws its leases where their dates say, another project\'s without a name', async () => {
    await page.goto(`${stack().url}/calendar/`);
    // The form offers the development admin's project (what the blazar CLI acts in without headers); a member signs in as alpha.
    await expect(page.getByLabel('Project').inputValue()).resolves.toBe('admin');
    await expect(page.getByLabel('admin').isChecked()).resolves.toBe(true);
    await page.getByLabel('Project').fill('alpha');
    await page.getByLabel('admin').uncheck();
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByText(`${hosts.length} hosts, 6 bookings loaded`, { exact: false }).waitFor();
    await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);

    const own = await pointOf('gpu-1', day + 11 * HOUR);
    expect(await pixel(own)).toEqual(PENDING);
    expect(await pixel(await pointOf('gpu-1', day + 9 * HOUR))).not.toEqual(PENDING); // before its start: no bar
    expect(await pixel(await pointOf('gpu-1', day + 12.5 * HOUR))).not.toEqual(PENDING); // after its end
    expect(await hover(own)).toContain('alpha-gpu-run (PENDING)');

    const other = await pointOf('cpu-1', day + 13 * HOUR);
    expect(await pixel(other)).toEqual(RESERVED);
    expect(await hover(other)).toContain('reserved by another project');
    expect(await page.content()).not.toContain('beta-secret-experiment');
    expect(calendarAnswers.length).toBeGreaterThan(0);
    expect(calendarAnswers.join('')).not.toContain('beta-secret-experiment');
    // The caller's own leases are listed as links too (keyboard and screen readers).
    await expect(page.getByRole('link', { name: 'alpha-gpu-run' }).count()).resolves.toBe(1);
    // Servers: the provider's band is filled to its booked share, the caller's part in green, another project's in grey.
    const ACTIVE = [0x1f, 0x8a, 0x4c];
    const rowHeight = Number(await page.getByTestId('capacity').getAttribute('data-row-height'));
    const nearBottom = rowHeight / 2 - 5; // inside the lower half (8 of 16 vCPUs: alpha's)
    const upperQuarter = -rowHeight / 2 + 5; // the band's top eighth, above 12 of 16 (alpha's 8 + beta's 4): free
    const busy = await pointIn('capacity', 0, day + 11.5 * HOUR, nearBottom);
    expect(await pixel(busy, 'capacity')).toEqual(ACTIVE);
    expect(await pixel(await pointIn('capacity', 0, day + 11.5 * HOUR, -2), 'capacity')).toEqual(RESERVED); // 8..12 of 16: beta's
    expect(await pixel(await pointIn('capacity', 0, day + 11.5 * HOUR, upperQuarter), 'capacity')).not.toEqual(RESERVED);
    expect(await pixel(await pointIn('capacity', 0, day + 16 * HOUR, nearBottom), 'capacity')).not.toEqual(ACTIVE); // after both
    expect(await hover(busy, 'capacity')).toContain('cpu-3: 12 of 16 vCPUs booked');
    await page.screenshot({ path: path.join(artefacts, 'calendar.png') });
    expect(await axeViolations()).toEqual([]);
  });

  it('moves and zooms with the keyboard', async () => {
    const gantt = page.getByTestId('gantt');
    const viewStart = async () => Number(await gantt.getAttribute('data-view-start'));
    const viewStartBecomes = (ms: number) => eventually(async () => ((await viewStart()) === ms ? true : undefined), 5_000, 50, () => `the view does not start at ${new Date(ms).toISOString()}`);
    const before = await viewStart();
    await gantt.focus();
    await page.keyboard.press('ArrowRight');
    await viewStartBecomes(before + (7 * DAY) / 8); // an eighth of the week later
    await page.keyboard.press('ArrowLeft');
    await viewStartBecomes(before);
    await page.keyboard.press('-');
    await expect(page.getByRole('button', { name: 'Month' }).getAttribute('aria-pressed')).resolves.toBe('true');
    await page.keyboard.press('+');
    await expect(page.getByRole('button', { name: 'Week' }).getAttribute('aria-pressed')).resolves.toBe('true');
    await page.getByRole('button', { name: 'Now' }).click();
    // Back to a week holding now (whatever the day: no dependence on when the test runs).
    await eventually(async () => {
      const [start, end] = [await viewStart(), Number(await gantt.getAttribute('data-view-end'))];
      return start <= Date.now() && Date.now() < end && end - start === 7 * DAY ? true : undefined;
    }, 5_000);
  });

  it('opens a lease from its bar, lists its possible extensions, and a refused extension offers the ends possible, one applied with a click', async () => {
    const bar = await pointOf('gpu-1', day + 13.5 * HOUR);
    const box = (await page.getByTestId('gantt').boundingBox())!;
    await page.mouse.click(box.x + bar.x, box.y + bar.y);
    await page.getByRole('heading', { name: /alpha-to-extend/ }).waitFor();
    expect(page.url()).toContain(`#/leases/${leases['alpha-to-extend']}`);
    await expect(page.getByRole('list', { name: 'Events' }).textContent()).resolves.toMatch(/Start.*End/);
    // The extensions possible now (GET extension-offers): gpu-1 is free until beta's booking at 16:00, then halves.
    const possible = (await alpha('GET', `/v1/leases/${leases['alpha-to-extend']}/extension-offers`)).body.offers as Array<{ end_date: string; reason: string }>;
    expect(possible[0].end_date).toBe(at(16));
    const listed = page.getByRole('list', { name: 'Possible extensions' }).locator('li');
    await expect(listed.first().textContent()).resolves.toContain(possible[0].reason);
    await expect(listed.count()).resolves.toBe(possible.length);

    // Past beta's booking of both GPU hosts from 16:00: refused, with the ends possible offered (16:00 the latest).
    await page.getByLabel('End (UTC)').fill(at(17).replace(' ', 'T'));
    await page.getByRole('button', { name: 'Change the end' }).click();
    const alert = page.getByRole('alert');
    await alert.waitFor();
    const offered = alert.getByRole('list', { name: 'What would work' });
    await expect(offered.locator('li').first().textContent()).resolves.toContain(`until ${at(16)} UTC`);
    await expect(offered.locator('li').nth(1).textContent()).resolves.toContain('a shorter extension');
    await page.screenshot({ path: path.join(artefacts, 'lease-refused-extension.png') });
    expect(await axeViolations()).toEqual([]);
    await offered.getByRole('button', { name: `Extend until ${at(16)}` }).click();
    await page.getByText(`Extended until ${at(16)}: done.`).waitFor();
    const lease = await alpha('GET', `/v1/leases/${leases['alpha-to-extend']}`);
    expect(lease.body.lease.end_date).toBe(`${at(16).replace(' ', 'T')}:00.000000`);
    await page.screenshot({ path: path.join(artefacts, 'lease.png') });
  });

  /** Fills "find a slot" (GPU hosts), asks, and answers the offers the API gave the page (POST /v1/offers). */
  async function findOffers(fields: { hosts: number; hours: number; from: string; name: string }, on: Page = page): Promise<Offer[]> {
    const form = on.getByRole('form', { name: 'What you need' });
    await form.getByLabel('How many hosts').fill(String(fields.hosts));
    await form.getByLabel('Properties').fill('["==", "$gpu", "a100"]');
    await form.getByLabel('For (hours)').fill(String(fields.hours));
    await form.getByLabel('From (UTC)').fill(fields.from.replace(' ', 'T'));
    await form.getByLabel('Lease name').fill(fields.name);
    const answered = on.waitForResponse((r) => r.url().endsWith('/v1/offers') && r.request().method() === 'POST');
    await form.getByRole('button', { name: 'Find offers' }).click();
    const answer = await answered;
    expect(answer.status()).toBe(200);
    return ((await answer.json()) as { offers: Offer[] }).offers;
  }
  const offerList = (on: Page = page) => on.getByRole('list', { name: 'Offers' });
  const offerItem = (id: string, on: Page = page) => offerList(on).locator(`li[data-offer-id="${id}"]`);
  const gpuLease = (who: typeof alpha, name: string, from: string, to: string, hostCount: number) =>
    who('POST', '/v1/leases', { name, start_date: from, end_date: to, reservations: [blazarHostReservation({ min: hostCount, max: hostCount, resource_properties: '["==", "$gpu", "a100"]' })] });

  it('lists the offers for two GPU hosts with their kind and reason, draws them, and books one that then appears', async () => {
    await page.getByRole('link', { name: '← Calendar' }).click();
    await page.getByTestId('gantt').waitFor();
    const offers = await findOffers({ hosts: 2, hours: 2, from: at(9), name: 'alpha-found-slot' });
    // Both GPU hosts are free together for 2 h first after beta's 16:00–18:00: later than asked.
    expect(offers[0]).toMatchObject({ kind: 'later', start_date: at(18), end_date: at(20) });
    const items = offerList().locator('li');
    await expect(items.count()).resolves.toBe(offers.length);
    for (const [i, offer] of offers.entries()) {
      const text = await items.nth(i).textContent();
      expect(text).toContain(`${KIND_WORDS[offer.kind]}: ${offer.start_date} UTC → ${offer.end_date} UTC`);
      expect(text).toContain('2 hosts');
      expect(text).toContain(offer.reason);
    }
    await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);
    await eventually(async () => ((await pixel(await pointOf('gpu-2', day + 19 * HOUR))).join() !== '255,255,255' ? true : undefined), 5_000); // the ghost bar tints the row (on the next frame)
    await page.screenshot({ path: path.join(artefacts, 'find-a-slot.png') });
    await items.first().getByRole('button', { name: 'Book' }).click();
    await page.getByText('Booked lease alpha-found-slot').waitFor();
    await page.getByRole('link', { name: 'alpha-found-slot' }).waitFor();
    await eventually(async () => ((await pixel(await pointOf('gpu-2', day + 19 * HOUR))).join() === PENDING.join() ? true : undefined), 10_000);
    const list = await alpha('GET', '/v1/leases');
    expect(list.body.leases).toContainEqual(expect.objectContaining({ name: 'alpha-found-slot', start_date: `${at(18).replace(' ', 'T')}:00.000000` }));
    await page.screenshot({ path: path.join(artefacts, 'booked.png') });
  });

  it('opens a lease with a tap on a touch screen, and deletes it from its page', async () => {
    const touch = await browser.newContext({ viewport: { width: 1000, height: 900 }, hasTouch: true, isMobile: true, deviceScaleFactor: 1 });
    try {
      const phone = await touch.newPage();
      phone.on('dialog', (dialog) => void dialog.accept());
      await phone.goto(`${stack().url}/calendar/`);
      await phone.getByLabel('Project').fill('alpha');
      await phone.getByLabel('admin').uncheck();
      await phone.getByRole('button', { name: 'Sign in' }).tap();
      await phone.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);
      const box = (await phone.getByTestId('gantt').boundingBox())!;
      const bar = await pointIn('gantt', hosts.indexOf('gpu-2'), day + 19 * HOUR, 0, phone);
      await phone.touchscreen.tap(box.x + bar.x, box.y + bar.y);
      await phone.getByRole('heading', { name: /alpha-found-slot/ }).waitFor();
      await phone.getByRole('button', { name: 'Delete' }).tap();
      await phone.getByRole('list', { name: 'Legend' }).waitFor(); // back on the calendar
      await eventually(async () => ((await alpha('GET', '/v1/leases')).body.leases.some((l: { name: string }) => l.name === 'alpha-found-slot') ? undefined : true), 30_000);
    } finally {
      await touch.close();
    }
  });

  it('holds an offer: a countdown to the hold\'s end, the hosts hatched and taken for another project, then Book makes the hold the lease', async () => {
    const offers = await findOffers({ hosts: 2, hours: 2, from: at(21), name: 'alpha-held-slot' });
    expect(offers[0]).toMatchObject({ kind: 'exact', start_date: at(21), end_date: at(23) });
    const item = offerItem(offers[0].id);
    await expect(item.textContent()).resolves.toContain(`${KIND_WORDS.exact}: ${at(21)} UTC → ${at(23)} UTC`);
    // The countdown (mm:ss, seconds rounded up) against the hold's expiry, by the page's own clock: its
    // Date.now stands still from before the Hold until the countdown is read, so that every redraw, however
    // late, shows the same time left (playwright's page.clock would also fake performance, whose marks
    // this page's tests wait on).
    const frozenMs = await page.evaluate(() => {
      const now = Date.now();
      const frozen = globalThis as unknown as { realDateNow?: () => number };
      frozen.realDateNow = Date.now;
      Date.now = () => now;
      return now;
    });
    const timer = item.getByRole('timer');
    let shownSeconds: number;
    try {
      await item.getByRole('button', { name: 'Hold' }).click();
      await timer.waitFor();
      const [minutes, seconds] = ((await timer.textContent()) ?? '').split(':').map(Number);
      shownSeconds = minutes * 60 + seconds;
    } finally {
      await page.evaluate(() => {
        const frozen = globalThis as unknown as { realDateNow?: () => number };
        if (frozen.realDateNow) Date.now = frozen.realDateNow;
      });
    }
    const hold = (await alpha('GET', `/v1/offers/${offers[0].id}/hold`)).body.hold as { id: string; status: string; expires_at: string };
    expect(hold.status).toBe('held');
    expect(shownSeconds).toBe(Math.ceil((Date.parse(hold.expires_at) - frozenMs) / 1000));

    // The calendar draws the held hosts hatched, says whose and until when; another project cannot book them.
    const heldBar = await pointOf('gpu-2', day + 22 * HOUR);
    const heldText = `held by you until ${hold.expires_at.slice(11, 19)} UTC`;
    await eventually(async () => ((await hover(heldBar)).includes(heldText) ? true : undefined), 5_000, 50, () => `the calendar does not show the hold (${heldText})`); // after the reload the hold asked for
    const across = await page.getByTestId('gantt').evaluate<string[], { x: number; y: number }, CanvasLike>((canvas, p) => {
      const data = canvas.getContext('2d')!.getImageData(Math.round(p.x), Math.round(p.y), 24, 1).data;
      return Array.from({ length: 24 }, (_, i) => [...data.slice(i * 4, i * 4 + 3)].join());
    }, heldBar);
    expect(across).toContain(HELD_FILL.join()); // the fill, and stripes of pending's blue across it (smoothed at their edges)
    expect(across.some((rgb) => rgb !== HELD_FILL.join() && Number(rgb.split(',')[0]) < 120 && Number(rgb.split(',')[2]) > 180)).toBe(true);
    const refused = await gpuLease(beta, 'beta-wants-held-gpu', at(21), at(23), 1);
    expect(refused.status).toBe(409);
    expect(refused.body.reason).toBe('capacity');
    await page.screenshot({ path: path.join(artefacts, 'held.png') });
    expect(await axeViolations()).toEqual([]);

    await item.getByRole('button', { name: 'Book' }).click();
    await page.getByText('Booked lease alpha-held-slot').waitFor();
    const lease = await alpha('GET', `/v1/leases/${hold.id}`);
    expect(lease.status).toBe(200);
    expect(lease.body.lease).toMatchObject({ id: hold.id, name: 'alpha-held-slot', start_date: `${at(21).replace(' ', 'T')}:00.000000` });
    await page.getByRole('link', { name: 'alpha-held-slot' }).waitFor();
  });

  it('releases a hold (the hosts are free again); a Hold over the cap and a Book refused meanwhile show the refusal in words, the latter with fresh offers', async () => {
    const offers = await findOffers({ hosts: 2, hours: 2, from: at(30), name: 'alpha-released-slot' });
    expect(offers[0]).toMatchObject({ kind: 'exact', start_date: at(30), end_date: at(32) });
    const item = offerItem(offers[0].id);
    await item.getByRole('button', { name: 'Hold' }).click();
    await item.getByRole('timer').waitFor();
    expect((await gpuLease(beta, 'beta-before-release', at(30), at(32), 1)).status).toBe(409);
    await item.getByRole('button', { name: 'Release' }).click();
    await page.getByText('Released the hold').waitFor();
    await expect(item.count()).resolves.toBe(0);
    expect((await alpha('GET', `/v1/offers/${offers[0].id}/hold`)).body.hold).toMatchObject({ status: 'ended', end_reason: 'released' });
    const created = await gpuLease(beta, 'beta-after-release', at(30), at(32), 2);
    expect(created.status).toBe(201);

    // Another offer, taken by beta before alpha books it: the refusal in words, and what fits now instead.
    const later = await findOffers({ hosts: 2, hours: 2, from: at(30), name: 'alpha-too-late' });
    expect(later[0].kind).toBe('later');
    // No hold allowed to alpha now: the 403 in words, the offers as they were.
    expect((await admin('PUT', '/v1/projects/alpha/policy', { max_offer_holds: 0 })).status).toBe(200);
    await offerItem(later[0].id).getByRole('button', { name: 'Hold' }).click();
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/^Usage policy: max_offer_holds: at most 0 offer hold/);
    expect((await admin('DELETE', '/v1/projects/alpha/policy')).status).toBe(204);
    await expect(offerList().locator('li').count()).resolves.toBe(later.length);
    expect((await gpuLease(beta, 'beta-first', later[0].start_date, later[0].end_date, 1)).status).toBe(201);
    await offerItem(later[0].id).getByRole('button', { name: 'Book' }).click();
    await expect(page.getByRole('alert').textContent()).resolves.toMatch(/^Taken meanwhile: .*What fits now is listed below\.$/);
    await expect(offerItem(later[0].id).count()).resolves.toBe(0);
    const fresh = await offerList().locator('li').first().getAttribute('data-offer-id');
    expect(fresh).not.toBe(later[0].id);
    expect((await alpha('GET', '/v1/leases')).body.leases.map((l: { name: string }) => l.name)).not.toContain('alpha-too-late');
  });

  it("counts a hold down with the page's clock, says when it expired, and Book still works then (the API checks again)", async () => {
    // A page of its own with a controlled clock: time moves only when the test says (no waiting).
    const context = await signedInContext('alpha', false);
    try {
      const clocked = await context.newPage();
      clocked.on('pageerror', (err) => pageErrors.push(String(err)));
      await clocked.clock.install();
      await clocked.goto(`${stack().url}/calendar/`);
      await clocked.getByText(`${hosts.length} hosts`, { exact: false }).waitFor();
      const offers = await findOffers({ hosts: 1, hours: 1, from: at(36), name: 'alpha-held-past-expiry' }, clocked);
      const item = offerItem(offers[0].id, clocked);
      await clocked.clock.pauseAt(Date.now() + 1_000);
      await item.getByRole('button', { name: 'Hold' }).click();
      const timer = item.getByRole('timer');
      await timer.waitFor();
      const shownSeconds = async () => {
        const [minutes, seconds] = ((await timer.textContent()) ?? '').split(':').map(Number);
        return minutes * 60 + seconds;
      };
      // The page's clock moves on (the first seconds may pass before its ticking starts): the countdown follows it, a second a second.
      const before = await shownSeconds();
      await clocked.clock.runFor(5_000);
      const later = await shownSeconds();
      expect(later).toBeLessThan(before);
      expect(later).toBeGreaterThanOrEqual(before - 5);
      await clocked.clock.runFor(3_000);
      expect(later - (await shownSeconds())).toBeGreaterThanOrEqual(2);
      expect(later - (await shownSeconds())).toBeLessThanOrEqual(4);
      await clocked.clock.fastForward(stack().config.offerHolds.holdMs);
      await item.getByText('the hold expired').waitFor();
      const hold = (await alpha('GET', `/v1/offers/${offers[0].id}/hold`)).body.hold as { id: string };
      await item.getByRole('button', { name: 'Book' }).click();
      await clocked.getByText('Booked lease alpha-held-past-expiry').waitFor();
      // The API's clock did not move: the hold was still live there, so it became the lease.
      expect((await alpha('GET', `/v1/leases/${hold.id}`)).body.lease).toMatchObject({ name: 'alpha-held-past-expiry' });
    } finally {
      await context.close();
    }
  });

  it('draws a series: its occurrences with a strip of the series colour, and the occurrence refused (partial) as a dashed gap', async () => {
    const SERIES = [0xd9, 0x73, 0x0d]; // web/src/paint.ts SERIES_COLOR
    const cpu = (count: number) => blazarHostReservation({ min: count, max: count, resource_properties: '["==", "$gpu", "none"]' });
    const first = day + 2 * DAY + 2 * HOUR; // 02:00 to 05:00 on three days, the second taken by beta on every CPU host
    const when = (ms: number) => new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
    expect((await beta('POST', '/v1/leases', { name: 'beta-all-cpus', start_date: when(first + DAY), end_date: when(first + DAY + 3 * HOUR), reservations: [cpu(3)] })).status).toBe(201);
    const created = await alpha('POST', '/v1/leases', { name: 'alpha-daily', start_date: when(first), end_date: when(first + 3 * HOUR), reservations: [cpu(1)], recurrence: 'FREQ=DAILY;COUNT=3', partial: true });
    expect(created.status).toBe(201);
    expect(created.body.refused.map((r: { name: string }) => r.name)).toEqual(['alpha-daily-2']);
    const allocations = (await alpha('GET', `/v1/os-hosts/allocations?lease_id=${created.body.leases[0].id}`)).body.allocations as Array<{ hypervisor_hostname: string; reservations: unknown[] }>;
    const host = allocations.find((a) => a.reservations.length > 0)!.hypervisor_hostname;
    await page.reload();
    await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);
    const row = hosts.indexOf(host);
    expect(await pixel(await pointIn('gantt', row, first + HOUR, 7))).toEqual(SERIES); // the foot of the first occurrence's bar
    const gap = await pointIn('gantt', row, first + DAY + HOUR, -7); // the top of the gap, over beta's booking
    expect(await pixel(gap)).toEqual(SERIES);
    expect(await hover(gap)).toContain('alpha-daily-2: not booked (capacity), a gap in series alpha-daily');
    await expect(page.getByRole('region', { name: 'Your leases in view' }).textContent()).resolves.toMatch(/alpha-daily-2 ?not booked/);
    await page.screenshot({ path: path.join(artefacts, 'series.png') });
  });

  it('draws preemptible bookings hatched and a preempted lease marked at its cut, and says so in the legend, on hover and among your leases', async () => {
    const PREEMPTED = [0x7a, 0x14, 0x14]; // web/src/paint.ts PREEMPTED_COLOR
    for (const name of ['spare-1', 'spare-2']) {
      await insertHost(stack().db.pool, { name, capabilities: { gpu: 'spare', slot: name } });
      hosts.push(name); // rows come in host order: the last two
    }
    const spare = (name: string, fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: JSON.stringify(['==', '$slot', name]), ...fields });
    const book = async (who: typeof alpha, name: string, start: number, end: number, reservation: Record<string, unknown>) => {
      const res = await who('POST', '/v1/leases', { name, start_date: at(start), end_date: at(end), reservations: [reservation] });
      expect({ name, status: res.status }).toEqual({ name, status: 201 });
    };
    await book(alpha, 'alpha-preemptible', 36, 60, spare('spare-1', { preemptible: true }));
    await book(beta, 'beta-preemptible', 36, 60, spare('spare-2', { preemptible: true }));
    await book(beta, 'beta-needs-spare', 48, 60, spare('spare-1')); // cuts alpha's lease to end at 48:00
    await page.reload();
    await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);

    /** 24 pixels across from a point, as "r,g,b". */
    const across = (p: { x: number; y: number }) =>
      page.getByTestId('gantt').evaluate<string[], { x: number; y: number }, CanvasLike>((canvas, at) => {
        const data = canvas.getContext('2d')!.getImageData(Math.round(at.x), Math.round(at.y), 24, 1).data;
        return Array.from({ length: 24 }, (_, i) => [...data.slice(i * 4, i * 4 + 3)].join());
      }, p);
    const white = (rgb: string) => rgb.split(',').every((c) => Number(c) >= 235);
    // Alpha's own preemptible booking: pending's blue with white stripes; beta's: reserved's grey with them; beta's regular one plain.
    const own = await pointOf('spare-1', day + 40 * HOUR);
    expect(await across(own)).toContain(PENDING.join());
    expect((await across(own)).some(white)).toBe(true);
    const theirs = await pointOf('spare-2', day + 40 * HOUR);
    expect(await across(theirs)).toContain(RESERVED.join());
    expect((await across(theirs)).some(white)).toBe(true);
    expect(new Set(await across(await pointOf('spare-1', day + 52 * HOUR)))).toEqual(new Set([RESERVED.join()]));
    // The preempted lease's mark, just before its cut.
    const cut = await pointOf('spare-1', day + 48 * HOUR);
    expect(await pixel({ x: cut.x - 2, y: cut.y })).toEqual(PREEMPTED);
    expect(await hover(own)).toContain(`alpha-preemptible (PENDING), preemptible, preempted: cut to end ${at(48)} UTC`);
    expect(await hover(theirs)).toContain('reserved by another project, preemptible');
    await expect(page.getByRole('list', { name: 'Legend' }).textContent()).resolves.toMatch(/preemptible \(a regular lease may take it back\).*preempted: cut to end at the dark mark/);
    const listed = page.getByRole('region', { name: 'Your leases in view' }).getByRole('listitem').filter({ hasText: 'alpha-preemptible' });
    await expect(listed.getByTitle(/^preemptible/).textContent()).resolves.toBe('preemptible');
    await expect(listed.textContent()).resolves.toContain(`preempted: cut to end ${at(48)} UTC`);
    await page.screenshot({ path: path.join(artefacts, 'preemptible.png') });
    expect(await axeViolations()).toEqual([]);
  });

  it("hatches lent time over its lender's bar, draws the borrower's booking on top, and says so in the legend and on hover", async () => {
    const LENT = [0xf0, 0xb4, 0x29]; // web/src/paint.ts LENT_STRIPE
    const pool = stack().db.pool;
    const hostId = await insertHost(pool, { name: 'lend-1', capabilities: { gpu: 'lend', slot: 'lend-1' } });
    hosts.push('lend-1'); // the last row
    const onIt = blazarHostReservation({ resource_properties: '["==", "$slot", "lend-1"]' });
    const lender = await alpha('POST', '/v1/leases', { name: 'alpha-lender', start_date: at(62), end_date: at(86), reservations: [onIt] });
    expect(lender.status).toBe(201);
    const reservationId: string = lender.body.lease.reservations[0].id;
    await inTransaction(pool, async (client) =>
      insertLendings(client, { lendingId: randomUUID(), reservationId, leaseId: lender.body.lease.id, projectId: 'alpha', hosts: await lenderRowsOf(client, reservationId, [hostId]), fromMs: day + 66 * HOUR, untilMs: day + 82 * HOUR }),
    );
    expect((await beta('POST', '/v1/leases', { name: 'beta-borrower', start_date: at(72), end_date: at(76), reservations: [{ ...onIt, preemptible: true }] })).status).toBe(201);
    await page.reload();
    await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);
    // Lent and nobody in it: the lender's blue with amber stripes; before the lending, plain blue.
    const lent = await pointOf('lend-1', day + 67 * HOUR);
    expect(await across(lent)).toEqual(expect.arrayContaining([PENDING.join(), LENT.join()]));
    expect(await across(await pointOf('lend-1', day + 63 * HOUR))).not.toContain(LENT.join());
    // The borrower's booking on top: reserved's grey, no amber.
    const borrowed = await pointOf('lend-1', day + 73 * HOUR);
    expect(await across(borrowed)).toContain(RESERVED.join());
    expect(await across(borrowed)).not.toContain(LENT.join());
    expect(await hover(lent)).toMatch(/alpha-lender \(PENDING\).* · lent to preemptible leases: /);
    expect(await hover(borrowed)).toContain('reserved by another project, preemptible, borrowed (inside a lending)');
    await expect(page.getByRole('list', { name: 'Legend' }).textContent()).resolves.toContain("lent: a lease's idle hosts, open to preemptible leases");
    await page.screenshot({ path: path.join(artefacts, 'lent.png') });
  });

  it("draws a Network calendar below the hosts: a booked segment as the host rows draw bookings, the caller's named, another project's reserved", async () => {
    const pool = stack().db.pool;
    for (const tag of ['250', '251']) await insertNetworkSegment(pool, { id: randomUUID(), networkType: 'vlan', physicalNetwork: 'physnet1', segmentId: tag, capabilities: {} });
    const network = (tag: string, name: string) => ({ resource_type: 'network', network_name: name, network_properties: JSON.stringify(['==', '$segment_id', tag]), resource_properties: '' });
    const own = await alpha('POST', '/v1/leases', { name: 'alpha-vlan', start_date: at(40), end_date: at(44), reservations: [network('250', 'alpha-lab-net')] });
    expect(own.status).toBe(201);
    expect((await beta('POST', '/v1/leases', { name: 'beta-secret-vlan', start_date: at(42), end_date: at(46), reservations: [network('251', 'beta-net')] })).status).toBe(201);
    await page.reload();
    await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);
    const section = page.getByRole('region', { name: 'Network segments over time' });
    await expect(section.getByRole('heading').textContent()).resolves.toContain('Network calendar');
    await expect(section.textContent()).resolves.toContain('2 segments, 2 bookings loaded');
    // Below the host calendar.
    const [hostsBox, networksBox] = await Promise.all([page.getByTestId('gantt').boundingBox(), page.getByTestId('network-gantt').boundingBox()]);
    expect(networksBox!.y).toBeGreaterThan(hostsBox!.y + hostsBox!.height);

    const ownBar = await pointIn('network-gantt', 0, day + 41 * HOUR, -7);
    expect(await pixel(ownBar, 'network-gantt')).toEqual(PENDING);
    expect(await pixel(await pointIn('network-gantt', 0, day + 45 * HOUR, -7), 'network-gantt')).not.toEqual(PENDING); // after its end
    expect(await hover(ownBar, 'network-gantt')).toMatch(/^vlan physnet1:250 · .* · alpha-vlan \(PENDING\)/);
    const theirs = await pointIn('network-gantt', 1, day + 45 * HOUR, -7);
    expect(await pixel(theirs, 'network-gantt')).toEqual(RESERVED);
    expect(await hover(theirs, 'network-gantt')).toContain('vlan physnet1:251');
    expect(await hover(theirs, 'network-gantt')).toContain('reserved by another project');
    expect(await page.content()).not.toContain('beta-secret-vlan');
    await page.screenshot({ path: path.join(artefacts, 'network-calendar.png') });
    expect(await axeViolations()).toEqual([]);

    // Its bar opens the lease, as a host's does.
    const box = (await page.getByTestId('network-gantt').boundingBox())!;
    await page.mouse.click(box.x + ownBar.x, box.y + ownBar.y);
    await page.getByRole('heading', { name: /alpha-vlan/ }).waitFor();
    expect(page.url()).toContain(`#/leases/${own.body.lease.id}`);
    await page.getByRole('link', { name: '← Calendar' }).click();
    await page.getByTestId('gantt').waitFor();
  });

  it('shows the usage policy\'s dry run before booking: a line per rule the lease as asked would break', async () => {
    expect((await admin('PUT', '/v1/projects/alpha/policy', { max_hosts: 1 })).status).toBe(200);
    try {
      const checked = page.waitForResponse((r) => r.url().endsWith('/v1/policy/check') && r.request().method() === 'POST');
      await findOffers({ hosts: 2, hours: 1, from: at(26), name: 'alpha-checked' });
      expect((await (await checked).json()).decision).toBe('refuse');
      await expect(page.getByRole('list', { name: 'Policy check' }).textContent()).resolves.toBe('The usage policy refuses it as asked: max_hosts: would be 2, limit 1');
    } finally {
      await admin('DELETE', '/v1/projects/alpha/policy');
    }
  });

  it("lists a lease waiting for approval to an admin, whose page has Approve and Deny; Approve with a reason lets it wait for its start", async () => {
    expect((await admin('PUT', '/v1/projects/waiting/policy', { approval: [{ always: true, timeout: 600 }] })).status).toBe(200);
    const waiting = apiClient(() => stack().url, { 'X-Project-Id': 'waiting', 'X-Roles': 'member' });
    const { body } = await waiting('POST', '/v1/leases', { name: 'waiting-for-approval', start_date: at(100), end_date: at(101), reservations: [blazarHostReservation()] });
    expect(body.lease.status).toBe('PENDING_APPROVAL');
    const context = await signedInContext('admin', true);
    try {
      const approver = await context.newPage();
      approver.on('pageerror', (err) => pageErrors.push(String(err)));
      await approver.goto(`${stack().url}/calendar/`);
      await approver.getByRole('region', { name: 'Waiting for approval' }).getByRole('link', { name: 'waiting-for-approval' }).click();
      await approver.getByRole('heading', { name: /waiting-for-approval/ }).getByText('PENDING_APPROVAL').waitFor();
      const approval = approver.getByRole('region', { name: 'Approval' });
      await approval.getByLabel('Reason').fill('course lab, week 3');
      await approval.getByRole('button', { name: 'Approve' }).click();
      await approver.getByText('Approved: done.').waitFor();
      await approver.getByRole('heading', { name: /waiting-for-approval/ }).getByText('PENDING', { exact: true }).waitFor();
      expect((await waiting('GET', `/v1/leases/${body.lease.id}`)).body.lease).toMatchObject({ status: 'PENDING', approval: { outcome: 'approved', answer_reason: 'course lab, week 3' } });
      expect(await approver.getByRole('region', { name: 'Approval' }).count()).toBe(0);
    } finally {
      await context.close();
    }
  });

  it("shades a powered-off host's row for an admin, from its power-off on, and shows a member nothing of hosts' power", async () => {
    const SLEEP = [0xd3, 0xcf, 0xe6]; // web/src/paint.ts SLEEP_SHADE
    const pool = stack().db.pool;
    const hostId = await insertHost(pool, { name: 'asleep-1', capabilities: { gpu: 'asleep' } });
    hosts.push('asleep-1'); // the last row
    await saveHostPowerSettings(pool, hostId, { driver: 'ipmi', address: '127.0.0.1', port: 623, username: 'lk', password: 'unused', node: null, manage: true, bootSeconds: null });
    const offSince = Date.now() - 6 * HOUR;
    await recordPowerState(pool, hostId, 'off', offSince);
    // The API: the admin's answer says since when (no planner runs here: no wake planned); a member's says nothing of power.
    const window = `start=${encodeURIComponent(at(-72))}&end=${encodeURIComponent(at(72))}`;
    expect((await admin('GET', `/v1/calendar?${window}`)).body.powered_off).toEqual([{ host_id: hostId, since_ms: expect.closeTo(offSince, -1), wake_ms: null }]);
    expect((await alpha('GET', `/v1/calendar?${window}`)).body).not.toHaveProperty('powered_off');

    const context = await signedInContext('admin', true);
    try {
      const adminPage = await context.newPage();
      adminPage.on('pageerror', (err) => pageErrors.push(String(err)));
      await adminPage.goto(`${stack().url}/calendar/`);
      await adminPage.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);
      const row = hosts.indexOf('asleep-1');
      // Shaded behind where its bookings would be, since its power-off; hatched on after now; plain before it.
      const slept = await pointIn('gantt', row, offSince + 3 * HOUR, 0, adminPage);
      expect(await across(slept, adminPage)).toContain(SLEEP.join());
      const planned = await across(await pointIn('gantt', row, Date.now() + 3 * HOUR, 0, adminPage), adminPage);
      expect(planned).toContain(SLEEP.join());
      expect(planned.filter((rgb) => rgb !== SLEEP.join()).length).toBeGreaterThan(4); // stripes, not a fill
      expect(await across(await pointIn('gantt', row, offSince - 6 * HOUR, 0, adminPage), adminPage)).not.toContain(SLEEP.join()); // 24 px: about 3.5 h of a week's view
      expect(await hover(slept, 'gantt', adminPage)).toMatch(/^asleep-1 · .* · free · powered off since .*, no wake planned$/);
      await expect(adminPage.getByRole('list', { name: 'Legend' }).textContent()).resolves.toContain('powered off');
      await adminPage.screenshot({ path: path.join(artefacts, 'powered-off.png') });
    } finally {
      await context.close();
    }

    // The member's page: the same row, the same instant, unshaded; no word of power in what it was sent or shows.
    const answersBefore = calendarAnswers.length;
    await page.goto(`${stack().url}/calendar/`);
    await page.waitForFunction(() => performance.getEntriesByName('calendar-drawn').length > 0);
    await eventually(() => Promise.resolve(calendarAnswers.length > answersBefore ? true : undefined), 15_000);
    expect(await across(await pointIn('gantt', hosts.indexOf('asleep-1'), offSince + 3 * HOUR))).not.toContain(SLEEP.join());
    expect(calendarAnswers.slice(answersBefore).join('')).not.toContain('powered_off');
    await expect(page.getByRole('list', { name: 'Legend' }).textContent()).resolves.not.toContain('powered off');
  });
});
