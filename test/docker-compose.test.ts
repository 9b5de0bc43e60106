/**
 * No Docker engine runs here, so the compose file is checked by structure: every service the
 * users need, pinned images, loopback ports, and environment that wires the services together
 * and passes leasekeeper's own configuration validation.
 */
import fs from 'node:fs';
import path from 'node:path';
import { parse } from 'yaml';
import { loadConfig } from '../src/config';

const ROOT = path.join(__dirname, '..');
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const compose: any = parse(fs.readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true });
const services = compose.services as Record<string, { image?: string; build?: string; command?: string[]; ports?: string[]; environment?: Record<string, string>; depends_on?: Record<string, unknown> | string[] }>;

describe('docker-compose.yml', () => {
  it('has Temporal with PostgreSQL persistence, its Web UI, PostgreSQL, the API and the worker', () => {
    expect(Object.keys(services).sort()).toEqual(['leasekeeper-api', 'leasekeeper-worker', 'postgresql', 'temporal', 'temporal-ui']);
    expect(services.temporal.environment).toMatchObject({ DB: 'postgres12', POSTGRES_SEEDS: 'postgresql' });
  });

  it('pins every image to a version', () => {
    for (const [name, service] of Object.entries(services)) {
      if (service.build) continue;
      expect(`${name}: ${service.image}`).toMatch(/^[\w-]+: [\w./-]+:\d[\w.-]*$/);
    }
  });

  it('publishes ports on loopback only: API 1234, Temporal 7233, Web UI 8233', () => {
    const published = Object.values(services).flatMap((s) => s.ports ?? []);
    expect(published.sort()).toEqual(['127.0.0.1:1234:1234', '127.0.0.1:7233:7233', '127.0.0.1:8233:8080']);
  });

  it("wires the API and worker to the compose PostgreSQL and Temporal, with settings leasekeeper accepts", () => {
    const pg = services.postgresql.environment ?? {};
    for (const name of ['leasekeeper-api', 'leasekeeper-worker']) {
      const service = services[name];
      expect(service.build).toBe('.');
      expect(Object.keys(service.depends_on ?? {})).toEqual(expect.arrayContaining(['postgresql', 'temporal']));
      const config = loadConfig(service.environment ?? {});
      const db = new URL(config.database.url);
      expect([db.hostname, db.port, db.username, db.password, db.pathname]).toEqual(['postgresql', '5432', pg.POSTGRES_USER, pg.POSTGRES_PASSWORD, `/${pg.POSTGRES_DB}`]);
      expect(config.temporal.address).toBe('temporal:7233');
      // The command must be a file the build produces from our sources.
      const entry = service.command?.[1] ?? '';
      expect(entry).toMatch(/^dist\/.*\.js$/);
      expect(fs.existsSync(path.join(ROOT, entry.replace(/^dist\//, '').replace(/\.js$/, '.ts')))).toBe(true);
    }
    expect(loadConfig(services['leasekeeper-api'].environment ?? {}).api).toMatchObject({ host: '0.0.0.0', port: 1234 });
    expect(services['temporal-ui'].environment?.TEMPORAL_ADDRESS).toBe('temporal:7233');
  });

  it('builds from a Dockerfile that runs the build and ships the migrations', () => {
    const dockerfile = fs.readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toMatch(/RUN npm ci/);
    expect(dockerfile).toMatch(/RUN npm run build/);
    expect(dockerfile).toContain('src/db/migrations');
    const copied = [...dockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1].split(' '));
    for (const source of copied) expect(fs.existsSync(path.join(ROOT, source))).toBe(true);
    // The build bundles the workflows and the calendar page (scripts/bundle-*.ts) from their sources.
    expect(copied).toEqual(expect.arrayContaining(['workflows', 'scripts', 'web']));
  });
});
