/**
 * An API process for the benchmarks that run the API apart (bench:admission with LK_BENCH_APIS):
 * the real API (src/api/main.ts), with physical:host booking on the calendar alone (no OpenStack
 * credentials to require), as the benchmark's worker books. It differs only in its resource types.
 */
import { registry } from '../src/domain/resource-plugin';
import { runApi } from '../src/api/main';
import { physicalHostType } from '../src/resources/physical-host';

runApi({ types: ({ pool }, calendar) => registry([physicalHostType({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' }, calendar)]) }).catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
