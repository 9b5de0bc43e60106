/**
 * The host JSON of os-hosts as Blazar's: `hypervisor_version` an integer (Nova's and Blazar's type,
 * kept as text in our table) and Blazar's computehosts `status` (null: nothing in Blazar sets it);
 * unknown query parameters ignored, as Blazar does.
 */
import { insertHost } from '../dev-stack/fixtures/hosts';
import { apiClient, useTestStack } from '../dev-stack/stack';

describe('os-hosts host JSON as Blazar\'s', () => {
  const stack = useTestStack({ noWorker: true });
  const asAdmin = apiClient(() => stack().url, { 'x-project-id': 'admin', 'x-roles': 'admin' });

  it('shows hypervisor_version as an integer (other text as it is, none as null) and status null', async () => {
    const pool = stack().db.pool;
    const ids = {
      nova: await insertHost(pool, { name: 'json-nova', hypervisor_version: '8002000' }),
      negative: await insertHost(pool, { name: 'json-negative', hypervisor_version: '-1' }),
      dotted: await insertHost(pool, { name: 'json-dotted', hypervisor_version: '2.6.1' }),
      huge: await insertHost(pool, { name: 'json-huge', hypervisor_version: '123456789012345678901' }),
      none: await insertHost(pool, { name: 'json-none' }),
    };
    const listed = await asAdmin('GET', '/v1/os-hosts');
    expect(listed.status).toBe(200);
    const byId = new Map(listed.body.hosts.map((h: { id: string }) => [h.id, h]));
    expect(Object.fromEntries(Object.entries(ids).map(([name, id]) => [name, byId.get(id)]))).toEqual({
      nova: expect.objectContaining({ hypervisor_version: 8_002_000, status: null }),
      negative: expect.objectContaining({ hypervisor_version: -1, status: null }),
      dotted: expect.objectContaining({ hypervisor_version: '2.6.1', status: null }),
      huge: expect.objectContaining({ hypervisor_version: '123456789012345678901', status: null }),
      none: expect.objectContaining({ hypervisor_version: null, status: null }),
    });
  });

  it('ignores unknown query parameters on the host list', async () => {
    const listed = await asAdmin('GET', '/v1/os-hosts');
    expect(await asAdmin('GET', '/v1/os-hosts?x=y&detail=true')).toEqual(listed);
  });
});
