/**
 * The instance-slot decisions (pure): free slots per host under capacity and host leases, packing,
 * affinity, fixed slots of an active reservation, and the earliest / longest fit.
 */
import { slotFit } from '../src/resources/virtual-instance/calendar';
import { canEverPlace, freeSlots, longestSlots, placeSlots, searchEarliestSlots, type SlotCalendar } from '../src/domain/instance-slots';

const H = 3_600_000;
const SLOT = { VCPU: 2, MEMORY_MB: 2048, DISK_GB: 10 };
const host = (id: string, vcpus = 8) => ({ id, capacity: { VCPU: vcpus, MEMORY_MB: 16_384, DISK_GB: 100 } });
const slotOn = (providerId: string, start: number, end: number, n = 1) => Array.from({ length: n }, () => ({ providerId, start: start * H, end: end * H, amounts: SLOT }));
const calendarOf = (fields: Partial<SlotCalendar>): SlotCalendar => ({ hosts: [host('1'), host('2'), host('3')], slots: [], wholeHost: [], cleaningMs: 0, ...fields });
const limits = { workBudget: 1_000_000, align: (ms: number) => ms };

describe('instance slots', () => {
  it('counts free slots by the scarcest resource, less what others booked, and none under a host lease (cleaning gap included)', () => {
    const calendar = calendarOf({ slots: slotOn('1', 0, 2, 3), wholeHost: [{ hostId: '2', start: 5 * H, end: 7 * H }], cleaningMs: H });
    expect(freeSlots(host('1'), calendar, SLOT, 0, 2 * H)).toBe(1); // 8 vCPU: 4 slots, 3 taken
    expect(freeSlots(host('1'), calendar, SLOT, 2 * H, 3 * H)).toBe(4);
    expect(freeSlots(host('1'), calendar, { VCPU: 1, MEMORY_MB: 8192, DISK_GB: 0 }, 3 * H, 4 * H)).toBe(2); // memory is scarcer
    expect(freeSlots(host('2'), calendar, SLOT, 3 * H, 4 * H + 1)).toBe(0); // less than the cleaning gap before the host lease
    expect(freeSlots(host('2'), calendar, SLOT, 3 * H, 4 * H)).toBe(4); // exactly the gap
    expect(freeSlots(host('2'), calendar, SLOT, 7 * H, 8 * H)).toBe(4);
  });

  it('packs slots onto hosts already serving instance reservations; affinity False spreads them, True keeps them on one host', () => {
    const calendar = calendarOf({ slots: slotOn('3', 0, 4) });
    expect(placeSlots({ slot: SLOT, amount: 3, affinity: null }, calendar, 0, 2 * H)).toEqual(new Map([['3', 3]]));
    expect(placeSlots({ slot: SLOT, amount: 5, affinity: null }, calendar, 0, 2 * H)).toEqual(new Map([['3', 3], ['1', 2]]));
    expect(placeSlots({ slot: SLOT, amount: 3, affinity: false }, calendar, 0, 2 * H)).toEqual(new Map([['3', 1], ['1', 1], ['2', 1]]));
    expect(placeSlots({ slot: SLOT, amount: 4, affinity: false }, calendar, 0, 2 * H)).toBeUndefined();
    expect(placeSlots({ slot: SLOT, amount: 4, affinity: true }, calendar, 0, 2 * H)).toEqual(new Map([['1', 4]])); // host 3 has only 3 left
    expect(placeSlots({ slot: SLOT, amount: 5, affinity: true }, calendar, 0, 2 * H)).toBeUndefined();
    expect(canEverPlace({ slot: SLOT, amount: 5, affinity: true }, calendar.hosts)).toBe(false);
    expect(canEverPlace({ slot: SLOT, amount: 12, affinity: null }, calendar.hosts)).toBe(true);
  });

  it('keeps an active reservation\'s slots where they are and adds new ones by the same rules', () => {
    const calendar = calendarOf({ slots: slotOn('1', 0, 4, 3) });
    expect(placeSlots({ slot: SLOT, amount: 3, affinity: null }, calendar, 0, 2 * H, { fixed: new Map([['2', 2]]) })).toEqual(new Map([['2', 3]]));
    expect(placeSlots({ slot: SLOT, amount: 2, affinity: false }, calendar, 0, 2 * H, { fixed: new Map([['2', 1]]) })).toEqual(new Map([['2', 1], ['1', 1]]));
    expect(placeSlots({ slot: SLOT, amount: 2, affinity: true }, calendar, 0, 2 * H, { fixed: new Map([['1', 1]]) })).toBeUndefined(); // host 1 has no room for a second
    expect(placeSlots({ slot: SLOT, amount: 1, affinity: null }, calendar, 0, 2 * H, { fixed: new Map([['1', 2]]) })).toBeUndefined(); // fixed beyond the room
  });

  it('finds the earliest start and the longest window', () => {
    const calendar = calendarOf({ hosts: [host('1')], slots: slotOn('1', 0, 3, 3), wholeHost: [{ hostId: '1', start: 10 * H, end: 12 * H }] });
    const request = { slot: SLOT, amount: 2, affinity: null };
    expect(searchEarliestSlots(request, calendar, 0, 2 * H, limits).earliest).toBe(3 * H);
    expect(searchEarliestSlots(request, calendar, 0, 8 * H, limits).earliest).toBe(12 * H); // 3–11 would cross the host lease
    expect(longestSlots(request, calendar, 0)).toBe(0);
    expect(longestSlots(request, calendar, 3 * H)).toBe(7 * H);
    expect(longestSlots({ ...request, amount: 1 }, calendar, 0)).toBe(10 * H);
    expect(longestSlots(request, calendar, 12 * H)).toBe(Infinity);
    expect(searchEarliestSlots(request, calendar, 0, 2 * H, { ...limits, workBudget: 0 })).toMatchObject({ earliest: undefined, cutShort: true });
  });

  it('finds a fit thousands of instants later on a busy calendar within the slot search budget (bench:offers: 10 000 slot bookings on 40 hosts)', () => {
    // 40 full hosts, each booked back to back by the hour from its own minute on: 20 of them for
    // 100 hours, the others for 400 (10 000 bookings, each ending at its own instant). The first
    // instance fits once one of the 20 frees, ~4 000 instants from the start.
    const MIN = 60_000;
    const hosts = Array.from({ length: 40 }, (_, i) => host(String(i + 1)));
    const slots = hosts.flatMap((h, i) => Array.from({ length: i < 20 ? 100 : 400 }, (_, k) => ({ providerId: h.id, start: k * H + i * MIN, end: (k + 1) * H + i * MIN, amounts: { VCPU: 8, MEMORY_MB: 0, DISK_GB: 0 } })));
    const busy: SlotCalendar = { hosts, slots, wholeHost: [], cleaningMs: 0 };
    const fit = slotFit({ slot: SLOT, amount: 1, affinity: null }, busy, 0, 2 * H, 0);
    expect(fit.cutShort).toBe(false);
    expect(fit.earliest).toBe(100 * H);
    expect(fit.tried).toBeGreaterThan(3_000);
  });
});
