/**
 * GET /v1/openapi.json: a valid OpenAPI 3.1 document (checked by a validator of the official
 * schema), describing every route the app answers and no other, each with a summary and a
 * description; and the app's real answers (successes and refusals) match the schemas it gives.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import Ajv2020 from 'ajv/dist/2020';
import addFormats from 'ajv-formats';
import pino from 'pino';
import { createApp } from '../src/api/app';
import { insertFloatingIp } from '../src/db/floating-ips';
import { pluginRegistry } from '../src/domain/resource-plugin';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { REPO_ROOT } from '../src/paths';
import { blazarHostReservation } from '../dev-stack/fixtures/builders';
import { insertHost } from '../dev-stack/fixtures/hosts';
import { appRoutes } from './support/routes';
import { inSeconds, useTestStack } from '../dev-stack/stack';

const METHODS = ['get', 'post', 'put', 'patch', 'delete'] as const;

interface Operation {
  summary?: string;
  description?: string;
  responses: Record<string, { content?: Record<string, { schema: object }> }>;
}
interface Document {
  openapi: string;
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, object> };
}

/** "METHOD /path" of every documented operation, with the `.json` suffix dropped as the app drops it from every path. */
function documentedRoutes(doc: Document): string[] {
  return Object.entries(doc.paths)
    .flatMap(([path, item]) => METHODS.filter((m) => item[m]).map((m) => `${m.toUpperCase()} ${path.replace(/\.json$/, '')}`))
    .sort();
}

describe('the OpenAPI description', () => {
  const plugins = (pool: Parameters<typeof physicalHostPlugin>[0]['pool']) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })];
  const stack = useTestStack({ withPool: plugins });
  let doc: Document;

  beforeAll(async () => {
    const res = await fetch(`${stack().url}/v1/openapi.json`); // no identity needed
    expect(res.status).toBe(200);
    doc = (await res.json()) as Document;
  });

  it('is valid OpenAPI 3.1', () => {
    expect(doc.openapi).toBe('3.1.0');
    // The validator is an ES module: run it as one, the document on its stdin.
    const script = `import { Validator } from '@seriousme/openapi-schema-validator';
      let text = ''; for await (const chunk of process.stdin) text += chunk;
      const result = await new Validator().validate(JSON.parse(text));
      process.stdout.write(JSON.stringify(result));`;
    const result = JSON.parse(execFileSync(process.execPath, ['--input-type=module', '-e', script], { cwd: REPO_ROOT, input: JSON.stringify(doc), encoding: 'utf8' })) as { valid: boolean; errors?: unknown };
    expect(result).toEqual({ valid: true });
  });

  it('describes every route of the app and no other, each with a summary and a description', () => {
    const s = stack();
    const app = createApp({ config: s.config, log: pino({ level: 'silent' }), pool: s.db.pool, connection: s.temporal.connection, client: s.temporal.client, types: pluginRegistry(plugins(s.db.pool)) });
    const routes = appRoutes(app).map((route) => route.replace(/:(\w+)/g, '{$1}')).sort();
    expect(routes.length).toBeGreaterThan(25);
    expect(routes).toContain('POST /v1/leases');
    expect(documentedRoutes(doc)).toEqual(routes);
    for (const [path, item] of Object.entries(doc.paths)) {
      for (const method of METHODS.filter((m) => item[m])) {
        const { summary, description } = item[method];
        expect({ route: `${method} ${path}`, summary: !!summary?.trim(), description: (description?.trim().length ?? 0) >= 20 }).toEqual({ route: `${method} ${path}`, summary: true, description: true });
      }
    }
    // The lease body names the reservation types this deployment runs, with their own parameters.
    expect(JSON.stringify(doc.paths['/v1/leases'].post)).toContain('"enum":["physical:host"]');
    expect(JSON.stringify(doc.paths['/v1/leases'].post)).toContain('hypervisor_properties');
  });

  it("matches the app's real answers, successes and refusals", async () => {
    const ajv = new Ajv2020({ strict: false, allErrors: true });
    addFormats(ajv);
    ajv.addSchema({ ...doc, $id: 'openapi' });
    const templates = Object.keys(doc.paths).map((path) => ({ path, pattern: new RegExp(`^${path.replace(/\{\w+\}/g, '[^/]+').replace(/\.json$/, '(\\.json)?')}$`) }));
    const checked = new Set<string>();

    /** Calls the API and validates the answer against the operation's schema for its status. */
    const call = async (method: string, url: string, body?: unknown, headers: Record<string, string> = {}) => {
      const res = await fetch(`${stack().url}${url}`, { method, headers: { 'content-type': 'application/json', ...headers }, body: body === undefined ? undefined : JSON.stringify(body) });
      const text = await res.text();
      const path = url.split('?')[0];
      const template = templates.find((t) => t.pattern.test(path))?.path;
      const operation = template ? doc.paths[template][method.toLowerCase()] : undefined;
      const response = operation?.responses[String(res.status)];
      expect({ call: `${method} ${url}`, status: res.status, documented: !!response }).toEqual({ call: `${method} ${url}`, status: res.status, documented: true });
      const schema = response!.content?.['application/json']?.schema;
      if (schema) {
        const pointer = `#/paths/${template!.replace(/~/g, '~0').replace(/\//g, '~1')}/${method.toLowerCase()}/responses/${res.status}/content/application~1json/schema`;
        const validate = ajv.getSchema(`openapi${pointer}`)!;
        const answer: unknown = JSON.parse(text);
        const valid = validate(answer);
        expect({ call: `${method} ${url}`, status: res.status, errors: valid ? null : validate.errors }).toEqual({ call: `${method} ${url}`, status: res.status, errors: null });
        checked.add(`${method} ${template} ${res.status}`);
        return answer as Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
      }
      expect(text).toBe(''); // documented without a body (204)
      checked.add(`${method} ${template} ${res.status}`);
      return undefined;
    };

    const hostId = await insertHost(stack().db.pool, { name: 'openapi-host', capabilities: { gpu: 'a100' } });
    const ipId = randomUUID();
    await insertFloatingIp(stack().db.pool, { id: ipId, networkId: randomUUID(), subnetId: randomUUID(), address: '203.0.113.7' });
    const window = { start_date: inSeconds(3600), end_date: inSeconds(7200) };

    await call('GET', '/');
    await call('GET', '/versions');
    await call('GET', '/healthz');
    await call('GET', '/calendar/settings');
    const created = await call('POST', '/v1/leases', { name: 'openapi-1', ...window, reservations: [blazarHostReservation()] });
    const leaseId = created!.lease.id as string;
    await call('POST', '/v1/leases', { name: 'openapi-2', ...window, reservations: [blazarHostReservation()] }); // 409: the only host is taken
    await call('POST', '/v1/leases', { name: 'openapi-3', start_date: 'tomorrow' }); // 400
    await call('GET', '/v1/leases');
    await call('GET', '/v1/leases?limit=1');
    await call('GET', `/v1/leases/${leaseId}`);
    await call('GET', `/v1/leases/${randomUUID()}`); // 404
    await call('PUT', `/v1/leases/${leaseId}`, { name: 'openapi-renamed' });
    await call('GET', '/v1/os-hosts');
    await call('GET', `/v1/os-hosts/${hostId}`);
    await call('GET', '/v1/os-hosts/properties?detail=1');
    await call('PATCH', '/v1/os-hosts/properties/gpu', { private: false });
    // A preemptible lease cut by a regular one (3 days ahead, on a host of its own): the allocations' and the calendar's flags.
    const spareId = await insertHost(stack().db.pool, { name: 'openapi-spare', capabilities: { pool: 'spare' } });
    const spare = (fields: Record<string, unknown> = {}) => blazarHostReservation({ resource_properties: '["==", "$pool", "spare"]', ...fields });
    const later = { start_date: inSeconds(3 * 86_400), end_date: inSeconds(3 * 86_400 + 7200) };
    await call('POST', '/v1/leases', { name: 'openapi-preemptible', ...later, reservations: [spare({ preemptible: true })] });
    await call('POST', '/v1/leases', { name: 'openapi-preempting', start_date: inSeconds(3 * 86_400 + 3600), end_date: later.end_date, reservations: [spare()] });
    await call('GET', `/v1/os-hosts/${spareId}/allocation`);
    const cutView = await call('GET', `/v1/calendar?start=${encodeURIComponent(later.start_date)}&end=${encodeURIComponent(later.end_date)}`);
    // The schema lets these fields be absent: the answer must have them for the check above to mean anything.
    const cutBookings = (cutView!.bookings as Array<Record<string, unknown>>).filter((b) => b.lease_name === 'openapi-preemptible');
    expect(cutBookings).toEqual([expect.objectContaining({ preemptible: true, preempted: true, cut_ms: expect.any(Number) })]);
    await call('GET', '/v1/os-hosts/allocations');
    await call('GET', `/v1/os-hosts/${hostId}/allocation`);
    await call('GET', '/v1/floatingips');
    await call('GET', `/v1/floatingips/${ipId}`);
    await call('GET', '/v1/floatingips/allocations');
    await call('GET', `/v1/floatingips/${ipId}/allocation`);
    await call('GET', `/v1/calendar?start=${encodeURIComponent(window.start_date)}&end=${encodeURIComponent(window.end_date)}`);
    await call('GET', `/v1/availability?start=${encodeURIComponent(window.start_date)}&end=${encodeURIComponent(window.end_date)}`);
    await call('POST', '/v1/availability/search', { ...window, reservations: [blazarHostReservation()] });
    // A series of recurring leases (a day later, clear of the lease above): shown, moved and deleted.
    const series = await call('POST', '/v1/leases', { name: 'openapi-series', start_date: inSeconds(86_400), end_date: inSeconds(90_000), reservations: [blazarHostReservation()], recurrence: 'FREQ=DAILY;COUNT=2' });
    await call('GET', `/v1/series/${series!.series.id}`);
    await call('PUT', `/v1/series/${series!.series.id}`, { duration: 30 });
    await call('GET', `/v1/series/${randomUUID()}`); // 404
    await call('DELETE', `/v1/series/${series!.series.id}`);
    // A member's lease waiting for approval (its `approval` object), approved by an admin; a member's answer and a second one refused.
    const member = { 'x-project-id': 'openapi-waits', 'x-roles': 'member' };
    await call('PUT', '/v1/projects/openapi-waits/policy', { approval: [{ always: true, timeout: 60 }] });
    const waiting = await call('POST', '/v1/leases', { name: 'openapi-waiting', start_date: inSeconds(2 * 86_400), end_date: inSeconds(2 * 86_400 + 3600) }, member);
    await call('POST', `/v1/leases/${waiting!.lease.id}/approve`, {}, member); // 403
    await call('POST', `/v1/leases/${waiting!.lease.id}/approve`, { reason: 'fine' });
    await call('POST', `/v1/leases/${waiting!.lease.id}/deny`, {}); // 409: answered already
    await call('DELETE', `/v1/leases/${waiting!.lease.id}`, undefined, member);
    await call('DELETE', `/v1/leases/${leaseId}`);
    await call('GET', '/v1/openapi.json');
    // A refusal was checked against the error body, and most routes against a real answer.
    expect(checked).toContain('POST /v1/leases 409');
    expect(checked.size).toBeGreaterThanOrEqual(25);
  });
});
