/**
 * `npm run bench:slots`: how long the instance-slot decisions hold the event loop on a large
 * calendar: 1 000 hosts and 100 000 slot bookings (100 per host, 5 h each, over four days). One
 * placement of 500 slots, the earliest-start search (within SLOT_SEARCH_WORK_BUDGET) for a request
 * that never fits, and the longest window. Prints p50/p99 per decision; writes
 * bench/results/slots.json. LK_BENCH_HOSTS / LK_BENCH_PER_HOST / LK_BENCH_SAMPLES override.
 */
import { longestSlots, placeSlots, searchEarliestSlots, type SlotCalendar } from '../src/domain/instance-slots';
import { SLOT_SEARCH_WORK_BUDGET } from '../src/resources/virtual-instance/calendar';
import { runBenchmark, summary } from './common';

const HOSTS = Number(process.env.LK_BENCH_HOSTS ?? 1_000);
const PER_HOST = Number(process.env.LK_BENCH_PER_HOST ?? 100);
const SAMPLES = Number(process.env.LK_BENCH_SAMPLES ?? 20);
const H = 3_600_000;

runBenchmark('slots', () => {
  for (const [name, value, max] of [['LK_BENCH_HOSTS', HOSTS, 10_000], ['LK_BENCH_PER_HOST', PER_HOST, 1_000], ['LK_BENCH_SAMPLES', SAMPLES, 1_000]] as const) {
    if (!Number.isInteger(value) || value < 1 || value > max) throw new Error(`${name} must be 1..${max}`);
  }
  const slot = { VCPU: 2, MEMORY_MB: 4096, DISK_GB: 20 };
  const calendar: SlotCalendar = {
    hosts: Array.from({ length: HOSTS }, (_, i) => ({ id: String(i + 1), capacity: { VCPU: 64, MEMORY_MB: 262_144, DISK_GB: 2000 } })),
    slots: Array.from({ length: HOSTS * PER_HOST }, (_, i) => ({ providerId: String((i % HOSTS) + 1), start: (i % 97) * H, end: ((i % 97) + 5) * H, amounts: slot })),
    wholeHost: [],
    cleaningMs: 0,
  };
  const timed = (work: () => void) => {
    const times: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const started = performance.now();
      work();
      times.push(performance.now() - started);
    }
    return summary(times);
  };
  let tries = 0;
  const results = {
    hosts: HOSTS,
    bookings: calendar.slots.length,
    workBudget: SLOT_SEARCH_WORK_BUDGET,
    placeMs: timed(() => placeSlots({ slot, amount: 500, affinity: null }, calendar, 0, 10 * H)),
    // More slots than the hosts ever hold at once: the search runs until its budget stops it.
    searchMs: timed(() => {
      tries = searchEarliestSlots({ slot, amount: HOSTS * 40, affinity: null }, calendar, 0, 50 * H, { workBudget: SLOT_SEARCH_WORK_BUDGET, align: (ms) => ms }).tried;
    }),
    longestMs: timed(() => longestSlots({ slot, amount: HOSTS, affinity: null }, calendar, 0, SLOT_SEARCH_WORK_BUDGET)),
  };
  console.log(`slots over ${HOSTS} hosts, ${calendar.slots.length} bookings: place p50 ${results.placeMs.p50} ms, search p50 ${results.searchMs.p50} ms (${tries} tries), longest p50 ${results.longestMs.p50} ms`);
  return Promise.resolve({ ...results, searchTries: tries });
});
