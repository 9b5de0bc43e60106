/**
 * The lease list queries the pending and list benchmarks time through the API, one at a time:
 * pages with and without a marker, per project, with status, name and window filters.
 * Leases are named pending-<i>, start one a minute from `firstStart`, and belong to PROJECTS projects.
 */
import { apiClient } from '../dev-stack/stack';
import { summary } from './common';
import { formatRequestDate } from '../src/domain/dates';

export const PROJECTS = 10;
const SAMPLES = 200;
const MINUTE = 60_000;

type Api = ReturnType<typeof apiClient>;

export const projectName = (p: number) => `bench-project-${p}`;
export const memberOf = (url: string, p: number): Api => apiClient(url, { 'X-Project-Id': projectName(p), 'X-Roles': 'member' });

export async function listLatency(url: string, leases: { admin: Api; members: Api[]; ids: string[][]; created: number; firstStart: number }) {
  const { admin, members, ids, created, firstStart } = leases;
  const pick = <T>(values: T[]) => values[Math.floor(Math.random() * values.length)];
  const project = () => Math.floor(Math.random() * PROJECTS);
  const queries: Record<string, () => [Api, string]> = {
    'admin, first page of 100': () => [admin, '/v1/leases?limit=100'],
    'admin, a page of 100 anywhere (marker)': () => [admin, `/v1/leases?limit=100&marker=${pick(pick(ids))}`],
    'project member, own page of 100 (marker)': () => {
      const p = project();
      return [members[p], `/v1/leases?limit=100&marker=${pick(ids[p])}`];
    },
    'admin, project + status filter, page of 100': () => [admin, `/v1/leases?limit=100&status=PENDING&project_id=${projectName(project())}`],
    'admin, by name': () => [admin, `/v1/leases?name=pending-${Math.floor(Math.random() * created)}`],
    'admin, leases overlapping one day, page of 100': () => {
      const from = firstStart + Math.floor(Math.random() * created) * MINUTE;
      return [admin, `/v1/leases?limit=100&from=${encodeURIComponent(formatRequestDate(from))}&to=${encodeURIComponent(formatRequestDate(from + 1440 * MINUTE))}`];
    },
    'project member, one lease by id': () => {
      const p = project();
      return [members[p], `/v1/leases/${pick(ids[p])}`];
    },
  };
  const latencyMs: Record<string, ReturnType<typeof summary>> = {};
  for (const [label, query] of Object.entries(queries)) {
    const latencies: number[] = [];
    for (let i = 0; i < SAMPLES; i++) {
      const [call, path] = query();
      const t = performance.now();
      const res = await call('GET', path);
      latencies.push(performance.now() - t);
      if (res.status !== 200) throw new Error(`GET ${path} (${url}): ${res.status} ${JSON.stringify(res.body)}`);
    }
    latencyMs[label] = summary(latencies);
  }
  return latencyMs;
}
