import { RecordingPlugin } from './support/recording-plugin';
import { apiClient, eventually, inSeconds, startTestStack, useTestStack } from '../dev-stack/stack';

const PROJECT_A = { 'x-project-id': 'project-a', 'x-user-id': 'alice', 'x-auth-token': 'notused' };
const PROJECT_B = { 'x-project-id': 'project-b', 'x-user-id': 'bob', 'x-auth-token': 'notused' };
const ADMIN = { 'x-auth-token': 'admin' };

describe('Blazar v1 lease API: validation, policy, paging, idempotency', () => {
  const stack = useTestStack({ plugins: [new RecordingPlugin()] });
  const asA = apiClient(() => stack().url, PROJECT_A);
  const asB = apiClient(() => stack().url, PROJECT_B);
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const later = () => ({ start_date: inSeconds(3600), end_date: inSeconds(7200) });

  it('answers / and /versions with 300 and the v1.0 document', async () => {
    for (const path of ['/', '/versions']) {
      const res = await fetch(`${stack().url}${path}`);
      expect(res.status).toBe(300);
      const body = await res.json();
      expect(body).toEqual({ versions: [{ id: 'v1.0', status: 'CURRENT', min_version: '1.0', max_version: '1.0', links: [{ rel: 'self', href: `${stack().config.api.publicUrl}/v1/` }] }] });
    }
  });

  it('accepts the .json suffix and answers the microversion header', async () => {
    const res = await fetch(`${stack().url}/v1/leases.json`, { headers: PROJECT_A });
    expect(res.status).toBe(200);
    expect(res.headers.get('openstack-api-version')).toBe('reservation 1.0');
    const bad = await fetch(`${stack().url}/v1/leases`, { headers: { ...PROJECT_A, 'OpenStack-API-Version': 'reservation 2.7' } });
    expect(bad.status).toBe(406);
  });

  it.each([
    [{ start_date: 'tomorrow', end_date: '2099-01-01 10:00' }, 'tomorrow is an invalid date. Required format: %Y-%m-%d %H:%M. start_date: expected "now" or "YYYY-MM-DD HH:MM" (UTC)'],
    [{ start_date: 'now', end_date: '2099-02-30 10:00' }, '2099-02-30 10:00 is an invalid date. Required format: %Y-%m-%d %H:%M. end_date: expected "YYYY-MM-DD HH:MM" (UTC)'],
    [{ start_date: 'now', end_date: 12 }, 'end_date: expected "YYYY-MM-DD HH:MM" (UTC)'],
    [{ start_date: 'now' }, 'Missing parameter end_date'],
    [{ start_date: 5, end_date: '2099-01-01 10:00' }, 'start_date: expected "now" or "YYYY-MM-DD HH:MM" (UTC)'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', reservations: 'x' }, 'reservations: expected a list'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', reservations: [5] }, 'reservations[0]: expected an object'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', reservations: [{}] }, 'Missing parameter reservations[0].resource_type'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', events: 'x' }, 'events: expected a list'],
    [{ start_date: '2099-01-01 10:00', end_date: '2099-01-01 09:00' }, 'End date must be later than start date.'],
    [{ start_date: '2001-01-01 10:00', end_date: '2099-01-01 09:00' }, 'Start date must be later than current date. start_date must be "now" or a later date.'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', before_end_date: '2100-01-01 00:00' }, 'Datetime is out of lease limits. before_end_date must be between start_date and end_date.'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', colour: 'blue' }, 'unknown field(s) "colour"'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', reservations: [{ resource_type: 'physical:teleporter' }] }, 'The physical:teleporter resource type is not supported. reservations[0].resource_type: supported: test:recording'],
    [{ start_date: 'now', end_date: '2099-01-01 09:00', reservations: [{ resource_type: 'test:recording', keys: 'x' }] }, 'reservations[0].keys: expected a list'],
  ])('refuses a bad create body with 400 naming the field: %j', async (fields, message) => {
    const res = await asA('POST', '/v1/leases', { name: 'bad', ...fields });
    expect(res).toEqual({ status: 400, body: { error_code: 400, error_message: message, error_name: 400 } });
  });

  it('refuses a missing, empty or over-long name and a non-object body', async () => {
    expect((await asA('POST', '/v1/leases', { ...later() })).body.error_message).toBe('Missing parameter name');
    expect((await asA('POST', '/v1/leases', { name: '  ', ...later() })).body.error_message).toBe('name: must not be empty');
    expect((await asA('POST', '/v1/leases', { name: 'x'.repeat(81), ...later() })).body.error_message).toBe('name: must be at most 80 characters');
    expect((await asA('POST', '/v1/leases', [1, 2])).body.error_message).toBe('expected a JSON object body (Content-Type: application/json)');
  });

  it("gives events UUIDs as Blazar does, one per event, the same on every read", async () => {
    const created = (await asA('POST', '/v1/leases', { name: 'event-ids', ...later() })).body.lease;
    const ids = created.events.map((e: { id: string }) => e.id);
    expect(ids).toHaveLength(3);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect(new Set(ids).size).toBe(3);
    expect((await asA('GET', `/v1/leases/${created.id}`)).body.lease.events.map((e: { id: string }) => e.id)).toEqual(ids);
    const listed = (await asA('GET', '/v1/leases')).body.leases.find((l: { id: string }) => l.id === created.id);
    expect(listed.events.map((e: { id: string }) => e.id)).toEqual(ids);
  });

  it('keeps lease names unique per project', async () => {
    expect((await asA('POST', '/v1/leases', { name: 'unique', ...later() })).status).toBe(201);
    const again = await asA('POST', '/v1/leases', { name: 'unique', ...later() });
    expect(again).toEqual({ status: 409, body: { error_code: 409, error_message: 'The lease with name: unique already exists. Names are unique per project (project-a).', error_name: 409 } });
    expect((await asB('POST', '/v1/leases', { name: 'unique', ...later() })).status).toBe(201);
  });

  it('shows a project only its own leases (others get 404), and admins everything', async () => {
    const mine = (await asA('POST', '/v1/leases', { name: 'private-a', ...later() })).body.lease;
    expect(mine).toMatchObject({ project_id: 'project-a', user_id: 'alice' });
    expect((await asB('GET', `/v1/leases/${mine.id}`)).status).toBe(404);
    expect((await asB('PUT', `/v1/leases/${mine.id}`, { name: 'stolen' })).status).toBe(404);
    expect((await asB('DELETE', `/v1/leases/${mine.id}`)).status).toBe(404);
    expect((await asB('GET', '/v1/leases')).body.leases.map((l: { project_id: string }) => l.project_id)).not.toContain('project-a');
    expect((await asB('GET', '/v1/leases?project_id=project-a')).status).toBe(403);
    expect((await asAdmin('GET', `/v1/leases/${mine.id}`)).status).toBe(200);
    const all = (await asAdmin('GET', '/v1/leases')).body.leases.map((l: { project_id: string }) => l.project_id);
    expect(new Set(all)).toEqual(new Set(['project-a', 'project-b']));
    expect((await asAdmin('GET', '/v1/leases?project_id=project-b')).body.leases.every((l: { project_id: string }) => l.project_id === 'project-b')).toBe(true);
  });

  it('pages with limit and marker, and filters by status, name and time window', async () => {
    const pager = apiClient(stack().url, { 'x-project-id': 'pager', 'x-user-id': 'p' });
    const ids: string[] = [];
    for (let i = 0; i < 5; i++) ids.push((await pager('POST', '/v1/leases', { name: `page-${i}`, start_date: inSeconds(3600 * (i + 1)), end_date: inSeconds(3600 * (i + 2)) })).body.lease.id);
    const first = await pager('GET', '/v1/leases?limit=2');
    expect(first.body.leases.map((l: { id: string }) => l.id)).toEqual(ids.slice(0, 2));
    expect(first.body.leases_links[0]).toEqual({ rel: 'next', href: `/v1/leases?limit=2&marker=${ids[1]}` });
    const second = await pager('GET', first.body.leases_links[0].href);
    expect(second.body.leases.map((l: { id: string }) => l.id)).toEqual(ids.slice(2, 4));
    const last = await pager('GET', `/v1/leases?limit=2&marker=${ids[3]}`);
    expect(last.body.leases.map((l: { id: string }) => l.id)).toEqual(ids.slice(4));
    expect(last.body.leases_links).toBeUndefined();

    expect((await pager('GET', '/v1/leases?name=page-3')).body.leases.map((l: { id: string }) => l.id)).toEqual([ids[3]]);
    expect((await pager('GET', '/v1/leases?status=ACTIVE')).body.leases).toEqual([]);
    expect((await pager('GET', '/v1/leases?status=PENDING')).body.leases).toHaveLength(5);
    const window = await pager('GET', `/v1/leases?from=${encodeURIComponent(inSeconds(3600 * 2.5))}&to=${encodeURIComponent(inSeconds(3600 * 3.5))}`);
    expect(window.body.leases.map((l: { id: string }) => l.id)).toEqual([ids[1], ids[2]]);

    expect((await pager('GET', '/v1/leases?limit=0')).status).toBe(400);
    expect((await pager('GET', '/v1/leases?status=SLEEPY')).body.error_message).toMatch(/^status: expected one of PENDING/);
    // Unknown parameters are ignored, as Blazar does (python-blazarclient's own, `?detail=true`, among them); known ones keep their checks.
    const everyLease = (await pager('GET', '/v1/leases')).body;
    for (const query of ['sort=name', 'detail=true', 'detail=true&sort=name&x=y']) expect(await pager('GET', `/v1/leases?${query}`)).toEqual({ status: 200, body: everyLease });
    expect((await pager('GET', '/v1/leases?detail=true&status=SLEEPY')).status).toBe(400);
    expect((await pager('GET', '/v1/leases?detail=true&limit=1')).body.leases.map((l: { id: string }) => l.id)).toEqual(ids.slice(0, 1));
  });

  it('returns the same lease for a request retried with the same Idempotency-Key', async () => {
    const body = { name: 'idempotent', ...later() };
    const first = await asA('POST', '/v1/leases', body, { 'Idempotency-Key': 'key-1' });
    const retry = await asA('POST', '/v1/leases', body, { 'Idempotency-Key': 'key-1' });
    expect(first.status).toBe(201);
    expect(retry.status).toBe(201);
    expect(retry.body.lease.id).toBe(first.body.lease.id);
    expect((await asA('GET', '/v1/leases?name=idempotent')).body.leases).toHaveLength(1);
    const reused = await asA('POST', '/v1/leases', { ...body, name: 'other' }, { 'Idempotency-Key': 'key-1' });
    expect(reused.status).toBe(409);
    expect(reused.body.error_message).toBe('this Idempotency-Key was already used for a different request');
  });

  it('refuses empty or unknown updates, and updates of unknown leases', async () => {
    const lease = (await asA('POST', '/v1/leases', { name: 'upd', ...later() })).body.lease;
    expect((await asA('PUT', `/v1/leases/${lease.id}`, {})).body.error_message).toMatch(/^nothing to update/);
    expect((await asA('PUT', `/v1/leases/${lease.id}`, { status: 'ACTIVE' })).body.error_message).toBe('unknown field(s) "status"');
    expect((await asA('PUT', '/v1/leases/00000000-0000-4000-8000-000000000000', { name: 'x' })).status).toBe(404);
    expect((await asA('GET', '/v1/leases/not-a-uuid')).status).toBe(404);
    expect((await asA('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: 'nope' }] })).body.error_message).toBe('Please enter valid reservation IDs. Invalid reservation IDs are: nope. reservations[0].id: lease upd has no such reservation.');
  });

  it('answers 503 naming the cause when no worker runs to admit a lease, and creates nothing', async () => {
    // The recording type books through the worker's reserve hook: its leases are admitted by their workflow.
    const quick = await startTestStack({ plugins: [new RecordingPlugin()], env: { LK_API_WORKFLOW_TIMEOUT_MS: '1500' } });
    try {
      await quick.stopWorker();
      const res = await apiClient(quick.url)('POST', '/v1/leases', { name: 'orphan', ...later(), reservations: [{ resource_type: 'test:recording' }] });
      expect(res.status).toBe(503);
      expect(res.body.error_message).toBe('the lease workflow did not answer within 1.5 s: is a leasekeeper worker running, and is the database up?');
      expect((await apiClient(quick.url)('GET', '/v1/leases')).body.leases).toEqual([]);
    } finally {
      await quick.stop();
    }
  });

  it('admits a lease the API can book itself with no worker running; its workflow runs once a worker is back', async () => {
    const quick = await startTestStack({ env: { LK_API_WORKFLOW_TIMEOUT_MS: '1500' } });
    try {
      await quick.stopWorker();
      const created = await apiClient(quick.url)('POST', '/v1/leases', { name: 'early', ...later() });
      expect(created.status).toBe(201);
      expect(created.body.lease.status).toBe('PENDING');
      // Started in Temporal already, waiting for a worker to run its first task.
      const handle = quick.temporal.client.workflow.getHandle(`lease-${created.body.lease.id}`);
      await eventually(async () => ((await handle.describe().catch(() => undefined))?.status.name === 'RUNNING' ? true : undefined));
      expect((await handle.fetchHistory()).events?.some((e) => e.workflowTaskCompletedEventAttributes)).toBe(false);
      await quick.startWorker();
      await eventually(async () => ((await handle.fetchHistory()).events?.some((e) => e.workflowTaskCompletedEventAttributes) ? true : undefined));
      const renamed = await apiClient(quick.url)('PUT', `/v1/leases/${created.body.lease.id}`, { name: 'renamed' });
      expect(renamed.status).toBe(200);
      expect(renamed.body.lease.name).toBe('renamed');
    } finally {
      await quick.stop();
    }
  });

});
