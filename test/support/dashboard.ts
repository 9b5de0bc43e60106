/**
 * The Grafana dashboard in the repository (deploy/grafana), held to real scrapes: each row's queries
 * may name only the metrics the process of that row exposes, and group or select only by labels
 * their series have. test/api-metrics.test.ts checks the API row, test/worker-metrics.test.ts the
 * worker's.
 */
import fs from 'node:fs';
import path from 'node:path';
import { REPO_ROOT } from '../../src/paths';

interface Panel {
  type: string;
  title: string;
  targets?: Array<{ expr: string }>;
}

export interface DashboardQuery {
  row: string;
  panel: string;
  expr: string;
}

/** Every query of every panel, with the row it sits under (a panel above every row: row ''). */
export function dashboardQueries(): DashboardQuery[] {
  const dashboard = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'deploy', 'grafana', 'leasekeeper-dashboard.json'), 'utf8')) as { panels: Panel[] };
  let row = '';
  const queries: DashboardQuery[] = [];
  for (const panel of dashboard.panels) {
    if (panel.type === 'row') row = panel.title;
    else for (const { expr } of panel.targets ?? []) queries.push({ row, panel: panel.title, expr });
  }
  return queries;
}

/** Label names by series name in Prometheus' text format. */
function seriesLabels(scrapes: string[]): Map<string, Set<string>> {
  const labels = new Map<string, Set<string>>();
  for (const line of scrapes.join('\n').split('\n')) {
    const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? \S+$/.exec(line);
    if (!match) continue;
    const names = labels.get(match[1]) ?? new Set<string>();
    for (const pair of (match[2] ?? '').matchAll(/(\w+)="/g)) names.add(pair[1]);
    labels.set(match[1], names);
  }
  return labels;
}

/**
 * What is wrong with `queries` against the `scrapes` of their process: a query naming no metric of
 * ours or the SDK's, a metric not exposed, a label (selected or grouped by) that its series lack.
 */
export function dashboardProblems(queries: DashboardQuery[], scrapes: string[]): string[] {
  const exposed = seriesLabels(scrapes);
  const problems: string[] = [];
  for (const { panel, expr } of queries) {
    const metrics = [...expr.matchAll(/\b((?:leasekeeper|temporal)_[a-z0-9_]+)(\{[^}]*\})?/g)];
    if (metrics.length === 0) problems.push(`${panel}: no leasekeeper_ or temporal_ metric in ${expr}`);
    for (const [, name, selector] of metrics) {
      const labels = exposed.get(name);
      if (!labels) {
        problems.push(`${panel}: ${name} is not exposed`);
        continue;
      }
      for (const [, label] of (selector ?? '').matchAll(/(\w+)\s*(?:=~|!~|!=|=)/g)) if (!labels.has(label)) problems.push(`${panel}: ${name} has no label ${label}`);
    }
    for (const [, list] of expr.matchAll(/\bby \(([^)]*)\)/g)) {
      for (const label of list.split(',').map((l) => l.trim())) {
        if (!metrics.some(([, name]) => exposed.get(name)?.has(label))) problems.push(`${panel}: no metric in ${expr} has the label ${label}`);
      }
    }
  }
  return problems;
}
