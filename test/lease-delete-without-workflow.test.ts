/**
 * A lease row no workflow runs is still deleted as Blazar deletes it: at once, and gone. Such rows
 * come from Blazar's import (terminated and failed leases come over as rows alone) and from a lease
 * whose workflow closed without recording it; a DELETE answered 404 "Lease not found" for a lease
 * the list still showed, and the row stayed for good (a cleanup waiting for it never ended).
 */
import { randomUUID } from 'node:crypto';
import { newLease } from '../src/domain/lease';
import { insertLeaseRows } from '../dev-stack/fixtures/lease-rows';
import { RecordingPlugin } from './support/recording-plugin';
import { apiClient, eventually, inSeconds, startedLeaseWorkflow, useTestStack } from '../dev-stack/stack';
import { leaseWorkflowId } from '../workflows/lease/messages';

const ADMIN = { 'x-auth-token': 'admin' };

describe('DELETE /v1/leases/{id} of a lease no workflow runs', () => {
  const stack = useTestStack({ plugins: [new RecordingPlugin()] });
  const asAdmin = apiClient(() => stack().url, ADMIN);
  const rowCount = async (id: string) => (await stack().db.pool.query('SELECT 1 FROM leases WHERE id = $1 AND deleted_at IS NULL', [id])).rowCount;

  it('an imported history lease (TERMINATED, a row alone): 204, and the lease is gone', async () => {
    const requestedMs = Date.now() - 10 * 86_400_000;
    const lease = { ...newLease({ id: randomUUID(), name: `history-${randomUUID().slice(0, 8)}`, projectId: 'admin', userId: 'admin', start: requestedMs + 60_000, end: requestedMs + 3_600_000, reservations: [], requestedMs }), status: 'TERMINATED' as const, version: 1 };
    await insertLeaseRows(stack().db.pool, [lease]);
    expect((await asAdmin('GET', `/v1/leases/${lease.id}`)).status).toBe(200);

    const answer = await asAdmin('DELETE', `/v1/leases/${lease.id}`);
    expect(answer.status).toBe(204);
    expect((await asAdmin('GET', `/v1/leases/${lease.id}`)).status).toBe(404);
    expect(await rowCount(lease.id)).toBe(0);
  });

  it('a lease whose workflow was terminated (from the Web UI or CLI): 204, and the lease is gone', async () => {
    const made = await asAdmin('POST', '/v1/leases', { name: `orphan-${randomUUID().slice(0, 8)}`, start_date: inSeconds(86_400).slice(0, 16), end_date: inSeconds(90_000).slice(0, 16), reservations: [] });
    expect(made.status).toBe(201);
    const id = made.body.lease.id as string;
    const { handle } = await startedLeaseWorkflow(stack(), id);
    await handle.terminate('an operator ended the workflow');

    const answer = await asAdmin('DELETE', `/v1/leases/${id}`);
    expect(answer.status).toBe(204);
    expect((await asAdmin('GET', `/v1/leases/${id}`)).status).toBe(404);
    expect(await rowCount(id)).toBe(0);
  });

  it('an Idempotency-Key whose first lease was refused by its workflow: the lease made with it again is run by a workflow, and deleted', async () => {
    const body = (name: string, reservations: unknown[]) => ({ name, start_date: inSeconds(86_400).slice(0, 16), end_date: inSeconds(90_000).slice(0, 16), reservations });
    const taken = `taken-${randomUUID().slice(0, 8)}`;
    expect((await asAdmin('POST', '/v1/leases', body(taken, []))).status).toBe(201);
    const key = randomUUID();
    // Admitted by its workflow, which refuses it (the name is taken) and closes.
    expect((await asAdmin('POST', '/v1/leases', body(taken, [{ resource_type: 'test:recording' }]), { 'idempotency-key': key })).status).toBe(409);
    // The same key, another request, admitted by the API.
    const made = await asAdmin('POST', '/v1/leases', body(`again-${randomUUID().slice(0, 8)}`, []), { 'idempotency-key': key });
    expect(made.status).toBe(201);
    const id = made.body.lease.id as string;
    // Its workflow runs it (the refused request's run closed): it starts and ends as any lease.
    const handle = stack().temporal.client.workflow.getHandle(leaseWorkflowId(id));
    await eventually(async () => ((await handle.describe()).status.name === 'RUNNING' ? true : undefined), 15_000, 50, () => `no workflow runs lease ${id}`);

    const answer = await asAdmin('DELETE', `/v1/leases/${id}`);
    expect(answer.status).toBe(204);
    expect((await asAdmin('GET', `/v1/leases/${id}`)).status).toBe(404);
    expect(await rowCount(id)).toBe(0);
  });
});
