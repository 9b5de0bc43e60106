/**
 * Each table has one store in src/db, and nobody else runs SQL on it (docs/architecture.md): a
 * statement naming one of our tables as what it reads (FROM), writes (INSERT INTO, UPDATE) or
 * deletes from is in that table's store. Joins may read another store's table to describe the
 * store's own rows (a booking's lease name, an address's host); a statement of its own is the
 * other store's.
 */
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');

/** The store of every table the migrations create. */
const OWNERS: Record<string, string> = {
  leases: 'src/db/leases.ts',
  lease_outbox: 'src/db/lease-outbox.ts',
  lease_preemptions: 'src/db/lease-preemptions.ts',
  host_lendings: 'src/db/host-lendings.ts',
  quantity_lendings: 'src/db/quantity-lendings.ts',
  hosts: 'src/db/hosts.ts',
  host_power: 'src/db/host-power.ts',
  host_boots: 'src/db/host-boots.ts',
  host_capabilities: 'src/db/hosts.ts',
  capability_settings: 'src/db/hosts.ts',
  inventory_version: 'src/db/hosts.ts',
  host_allocations: 'src/db/host-allocations.ts',
  host_maintenance: 'src/db/maintenance.ts',
  capacity_providers: 'src/db/quantity-allocations.ts',
  quantity_allocations: 'src/db/quantity-allocations.ts',
  compute_host_health: 'src/db/quantity-allocations.ts',
  floating_ips: 'src/db/floating-ips.ts',
  floating_ip_allocations: 'src/db/floating-ips.ts',
  network_segments: 'src/db/network-segments.ts',
  network_segment_allocations: 'src/db/network-segment-allocations.ts',
  project_policies: 'src/db/usage-policy.ts',
  project_webhooks: 'src/db/webhooks.ts',
  offers: 'src/db/offers.ts',
  offer_holds: 'src/db/offer-holds.ts',
  lease_series: 'src/db/series.ts',
  idempotency_keys: 'src/db/idempotency-keys.ts',
  schema_migrations: 'src/db/migrate.ts',
};

/** Reads Blazar's database (whose tables share some of our names), never ours. */
const FOREIGN_DATABASE = new Set(['src/import/blazar-source.ts']);

function sourceFiles(dir: string): string[] {
  return fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = `${dir}/${entry.name}`;
    if (entry.isDirectory()) return sourceFiles(relative);
    return entry.name.endsWith('.ts') ? [relative] : [];
  });
}

function createdTables(): string[] {
  const dir = path.join(ROOT, 'src/db/migrations');
  return fs
    .readdirSync(dir)
    .filter((name) => name.endsWith('.sql'))
    .flatMap((name) => [...fs.readFileSync(path.join(dir, name), 'utf8').matchAll(/CREATE TABLE (?:IF NOT EXISTS )?(\w+)/g)].map((m) => m[1]));
}

/** Per file, the statements on a table of another store: `keyword table`. */
function trespasses(): Record<string, string[]> {
  const found: Record<string, string[]> = {};
  const tables = Object.keys(OWNERS).join('|');
  const statement = new RegExp(`\\b(FROM|INSERT INTO|UPDATE|DELETE FROM)\\s+(${tables})\\b`, 'g');
  for (const file of ['src', 'activities', 'worker', 'workflows'].flatMap(sourceFiles)) {
    if (FOREIGN_DATABASE.has(file)) continue;
    const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
    for (const [, keyword, table] of text.matchAll(statement)) {
      if (OWNERS[table] !== file) (found[file] ??= []).push(`${keyword.replace(/ .*/, '')} ${table}`);
    }
  }
  return found;
}

describe('tables and their stores', () => {
  test('every table the migrations create has a store, and every store named exists', () => {
    const tables = createdTables();
    expect(tables.length).toBeGreaterThan(10);
    expect(tables.filter((table) => !(table in OWNERS))).toEqual([]);
    expect(Object.values(OWNERS).filter((file) => !fs.existsSync(path.join(ROOT, file)))).toEqual([]);
  });

  test('no statement reads, writes or deletes a table outside its store', () => {
    expect(trespasses()).toEqual({});
  });
});
