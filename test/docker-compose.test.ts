/**
 * No Docker engine runs here, so the compose file is checked by structure: every service the
 * users need, pinned images, loopback ports, and environment that wires the services together
 * and passes leasekeeper's own configuration validation. Its Temporal is held to what the tests
 * run with LK_TEMPORAL=server: the same versions built from the same Go modules, the same schema
 * script and dynamic config, and a server config that temporal-server itself renders the same.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parse, stringify } from 'yaml';
import { COMPOSE_TEMPORAL, temporalServerBinaries } from '../dev-stack/temporal-server';
import { loadConfig } from '../src/config';

const ROOT = path.join(__dirname, '..');
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const compose: any = parse(fs.readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8'), { merge: true });
type Service = { image?: string; build?: string | { context: string; dockerfile: string }; command?: string[]; ports?: string[]; environment?: Record<string, string>; depends_on?: Record<string, { condition: string }> };
const services = compose.services as Record<string, Service>;
const temporalDockerfile = fs.readFileSync(path.join(ROOT, 'deploy', 'temporal', 'Dockerfile'), 'utf8');
const buildScript = fs.readFileSync(path.join(ROOT, 'scripts', 'build-temporal.sh'), 'utf8');

describe('docker-compose.yml', () => {
  it('has PostgreSQL, Temporal (schema, server, namespace, Web UI), the API and the worker', () => {
    expect(Object.keys(services).sort()).toEqual(['leasekeeper-api', 'leasekeeper-worker', 'postgresql', 'temporal', 'temporal-prepare', 'temporal-schema', 'temporal-ui']);
  });

  it('pins every image to a version; the images it builds come from this repository', () => {
    const built = new Set(Object.values(services).filter((s) => s.build && s.image).map((s) => s.image));
    for (const [name, service] of Object.entries(services)) {
      if (service.build) continue;
      expect(`${name}: ${service.image}`).toMatch(/^[\w-]+: [\w./-]+:\d[\w.-]*$/);
      if (service.image?.startsWith('leasekeeper')) expect(built).toContain(service.image);
    }
  });

  it('publishes ports on loopback only: API 1234, Temporal 7233, Web UI 8233', () => {
    const published = Object.values(services).flatMap((s) => s.ports ?? []);
    expect(published.sort()).toEqual(['127.0.0.1:1234:1234', '127.0.0.1:7233:7233', '127.0.0.1:8233:8080']);
  });

  it('starts in order: PostgreSQL healthy, schema set up, server, namespace prepared, then the UI, the worker and the API', () => {
    const dependsOn = (name: string) => Object.fromEntries(Object.entries(services[name].depends_on ?? {}).map(([on, { condition }]) => [on, condition]));
    expect(dependsOn('temporal-schema')).toEqual({ postgresql: 'service_healthy' });
    expect(dependsOn('temporal')).toEqual({ 'temporal-schema': 'service_completed_successfully' });
    expect(dependsOn('temporal-prepare')).toEqual({ temporal: 'service_started' });
    expect(services['temporal-prepare'].command).toEqual(expect.arrayContaining(['--wait-seconds']));
    expect(dependsOn('temporal-ui')).toEqual({ 'temporal-prepare': 'service_completed_successfully' });
    for (const name of ['leasekeeper-api', 'leasekeeper-worker']) {
      expect(dependsOn(name)).toEqual({ postgresql: 'service_healthy', 'temporal-prepare': 'service_completed_successfully' });
    }
  });

  it("wires leasekeeper's services to the compose PostgreSQL and Temporal, with settings leasekeeper accepts", () => {
    const pg = services.postgresql.environment ?? {};
    for (const name of ['leasekeeper-api', 'leasekeeper-worker', 'temporal-prepare']) {
      const service = services[name];
      expect(service.build).toBe('.');
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
  });

  it("builds Temporal from the same Go modules and versions as scripts/build-temporal.sh", () => {
    const version = (name: string, text: string) => new RegExp(`^(?:ARG )?${name}="?([\\d.]+)"?`, 'm').exec(text)?.[1];
    expect(version('SERVER_VERSION', temporalDockerfile)).toBe(version('SERVER_VERSION', buildScript));
    expect(version('UI_VERSION', temporalDockerfile)).toBe(version('UI_VERSION', buildScript));
    expect(version('SERVER_VERSION', buildScript)).toMatch(/^\d+\.\d+\.\d+$/);
    const packages = (text: string) => [...text.matchAll(/(go\.temporal\.io\/server\/cmd\/[\w/]+|github\.com\/temporalio\/ui-server\/v2\/cmd\/server)/g)].map((m) => m[1]).sort();
    expect(packages(temporalDockerfile)).toEqual([...new Set(packages(buildScript))].sort());
    expect(packages(temporalDockerfile)).toHaveLength(3);
    expect(services['temporal-schema'].build).toEqual({ context: '.', dockerfile: 'deploy/temporal/Dockerfile' });
    // Everything the image copies from the repository exists.
    const copied = [...temporalDockerfile.matchAll(/^COPY (?!--from)(.+) \S+$/gm)].flatMap((m) => m[1].split(' '));
    expect(copied.length).toBeGreaterThan(0);
    for (const source of copied) expect(fs.existsSync(path.join(ROOT, source))).toBe(true);
  });

  it('sets up the schema with the same script and login as the tests, on the compose PostgreSQL', () => {
    expect(services['temporal-schema'].command).toEqual(['/etc/temporal/setup-schema.sh']);
    expect(temporalDockerfile).toMatch(/^COPY deploy\/temporal\/setup-schema\.sh .*\/etc\/temporal\/$/m);
    const pg = services.postgresql.environment ?? {};
    const { database } = COMPOSE_TEMPORAL;
    expect(services['temporal-schema'].environment).toEqual({ SQL_HOST: database.host, SQL_PORT: String(database.port), SQL_USER: database.user, SQL_PASSWORD: database.password });
    expect([database.user, database.password]).toEqual([pg.POSTGRES_USER, pg.POSTGRES_PASSWORD]);
  });

  it("runs temporal-server with the tests' config for compose's hosts (rendered by temporal-server itself) and a dynamic config it knows", () => {
    const { server } = temporalServerBinaries(loadConfig().cacheDir);
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-compose-config-'));
    try {
      fs.mkdirSync(path.join(tmp, 'config'));
      fs.writeFileSync(path.join(tmp, 'config', 'docker.yaml'), '# enable-template\n' + stringify(COMPOSE_TEMPORAL.serverConfig()));
      const render = (configDir: string) => execFileSync(server, ['--config', configDir, '--env', 'docker', 'render-config'], { env: { ...process.env, TEMPORAL_IP: '10.9.8.7' }, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      const checkedIn = render(path.join(ROOT, 'deploy', 'temporal', 'config'));
      expect(checkedIn).toContain('broadcastAddress: 10.9.8.7');
      expect(checkedIn).toContain('connectAddr: postgresql:5432');
      expect(checkedIn).toEqual(render(path.join(tmp, 'config')));
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
    expect(COMPOSE_TEMPORAL.serverConfig()).toMatchObject({ dynamicConfigClient: { filepath: '/etc/temporal/dynamicconfig.yaml' } });
    expect(temporalDockerfile).toMatch(/^COPY .*deploy\/temporal\/dynamicconfig\.yaml \/etc\/temporal\/$/m);
    const validated = execFileSync(server, ['validate-dynamic-config', path.join(ROOT, 'deploy', 'temporal', 'dynamicconfig.yaml')], { encoding: 'utf8' });
    expect(validated).toContain('dynamicconfig.yaml');
    expect(validated).not.toMatch(/warning|error/i);
  });

  it('points the Web UI at the compose Temporal and its published address', () => {
    const uiConfig = parse(fs.readFileSync(path.join(ROOT, 'deploy', 'temporal', 'ui', 'config', 'docker.yaml'), 'utf8'));
    expect(uiConfig).toEqual(COMPOSE_TEMPORAL.uiConfig());
    expect(uiConfig).toMatchObject({ temporalGrpcAddress: 'temporal:7233', port: 8080, cors: { allowOrigins: ['http://127.0.0.1:8233'] } });
    expect(services['temporal-ui'].command).toEqual(['temporal-ui-server', '--root', '/etc/temporal/ui', '--config', 'config', '--env', 'docker', 'start']);
    expect(fs.existsSync(path.join(ROOT, 'deploy', 'temporal', 'ui', 'config', 'base.yaml'))).toBe(true);
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
