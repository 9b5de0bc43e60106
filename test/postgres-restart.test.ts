/**
 * PostgreSQL stopped for a few seconds and started again while clients keep creating host leases.
 * Every request either succeeds or fails cleanly (503 with Blazar's error body, or a genuine 409);
 * nothing is half-written: a retry with the same Idempotency-Key converges, every booking belongs
 * to a live lease, every live lease's row agrees with its workflow, and no host is booked twice.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { delay, type ManagedProcess } from '../dev-stack/processes';
import { ensureCluster, ensureDatabase, localUrl, startPostgres } from '../dev-stack/postgres-local';
import { physicalHostPlugin } from '../src/resources/physical-host';
import { getLease } from '../workflows/lease/messages';
import { hostReservation } from '../dev-stack/fixtures/builders';
import { doubleBookings, insertHost } from '../dev-stack/fixtures/hosts';
import { freePort } from '../dev-stack/ports';
import { apiClient, startedLeaseWorkflow, useTestStack, type ApiCall } from '../dev-stack/stack';

const HOSTS = 10;
const CLIENTS = 8;
const LOAD_MS = 12_000;
const OUTAGE_AFTER_MS = 3_000;
const OUTAGE_MS = 3_000;
const DAY = 86_400_000;

describe('PostgreSQL restarted mid-admission', () => {
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-pg-restart-'));
  fs.chmodSync(tmp, 0o755); // the postgres system user must reach its data dir below
  const dataDir = path.join(tmp, 'postgres');
  let port: number;
  let postgres: ManagedProcess | undefined;

  beforeAll(async () => {
    port = await freePort();
    ensureCluster(dataDir);
    postgres = startPostgres({ dataDir, port, durable: true });
    await ensureDatabase(localUrl(port, 'leasekeeper'));
  }, 120_000);
  const stack = useTestStack(
    () => ({
      databaseServer: localUrl(port, 'leasekeeper'),
      env: { LK_API_WORKFLOW_TIMEOUT_MS: '20000' },
      withPool: (pool) => [physicalHostPlugin({ pool, settings: { cleaningMs: 0, randomChoice: false }, cloud: 'calendar-only' })],
    }),
    { timeoutMs: 120_000 },
  );
  beforeAll(async () => {
    for (let i = 0; i < HOSTS; i++) await insertHost(stack().db.pool, { name: `pg-host-${i}` });
  });

  afterAll(async () => {
    await postgres?.stop();
    fs.rmSync(tmp, { recursive: true, force: true });
  });

  it('answers every request with success, a 409 or a clean 503, and leaves nothing half-written', async () => {
    const api = apiClient(stack().url);
    const horizon = Date.UTC(2099, 0, 1);
    const bodyOf = (i: number) => {
      // Windows of 1–3 days within two months over 10 hosts: many fit, some conflict.
      const start = horizon + (i * 7919 % 60) * DAY;
      const end = start + (1 + (i % 3)) * DAY;
      const date = (ms: number) => new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
      return { name: `pg-${i}`, start_date: date(start), end_date: date(end), reservations: [hostReservation()] };
    };
    const create = (i: number) => api('POST', '/v1/leases', bodyOf(i), { 'Idempotency-Key': `pg-${i}` });

    const answers = new Map<number, ApiCall & { sent: number; answered: number }>();
    const outage = { began: 0, ended: 0, readDuring: undefined as ApiCall | undefined };
    let serial = 0;
    const began = Date.now();
    const restart = (async () => {
      await delay(OUTAGE_AFTER_MS);
      outage.began = Date.now();
      await postgres!.stop(); // fast shutdown: open transactions are rolled back, connections cut
      outage.readDuring = await api('GET', '/v1/leases');
      await delay(OUTAGE_MS);
      postgres = startPostgres({ dataDir, port, durable: true });
      await ensureDatabase(localUrl(port, 'leasekeeper'));
      outage.ended = Date.now();
    })();
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (Date.now() - began < LOAD_MS) {
          const i = serial++;
          const sent = Date.now();
          answers.set(i, { ...(await create(i)), sent, answered: Date.now() });
        }
      }),
    );
    await restart;

    const statuses = [...answers.values()].map((a) => a.status);
    const count = (status: number) => statuses.filter((s) => s === status).length;
    console.log(`PostgreSQL down ${outage.ended - outage.began} ms; ${answers.size} creates: ${count(201)} × 201, ${count(409)} × 409, ${count(503)} × 503`);
    expect(outage.readDuring).toEqual({ status: 503, body: { error_code: 503, error_name: 503, error_message: 'the database is unavailable: try again shortly' } });
    for (const answer of answers.values()) {
      expect([201, 409, 503]).toContain(answer.status);
      if (answer.status !== 201) expect({ status: answer.status, body: answer.body }).toEqual({ status: answer.status, body: expect.objectContaining({ error_code: answer.status, error_name: answer.status, error_message: expect.any(String) }) });
    }
    // The outage was hit: creates were in flight while PostgreSQL was down.
    const spanning = [...answers.values()].filter((a) => a.sent < outage.ended && a.answered > outage.began);
    console.log(`${spanning.length} creates were in flight during the outage: ${spanning.map((a) => a.status).join(', ')}`);
    expect(spanning.length).toBeGreaterThan(0);
    expect(count(201)).toBeGreaterThan(0);

    // Clients retry what failed with its Idempotency-Key: each converges to a lease or a genuine 409.
    // As many at once as there were clients: the outage's fast 503s are many, and one by one they took minutes.
    const leaseIds = new Set<string>();
    const pending = [...answers];
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        for (let next = pending.shift(); next; next = pending.shift()) {
          const [i, answer] = next;
          const final: ApiCall = answer.status === 503 ? await create(i) : answer;
          expect([201, 409]).toContain(final.status);
          if (final.status === 201) leaseIds.add(final.body.lease.id);
        }
      }),
    );

    const { pool } = stack().db;
    const { rows: live } = await pool.query<{ id: string; status: string; version: number }>("SELECT id::text, status, version FROM leases WHERE deleted_at IS NULL");
    expect(new Set(live.map((l) => l.id))).toEqual(leaseIds);
    const { rows: bookings } = await pool.query<{ lease_id: string; n: string }>('SELECT lease_id::text, count(*) AS n FROM host_allocations GROUP BY lease_id');
    expect(new Map(bookings.map((b) => [b.lease_id, Number(b.n)]))).toEqual(new Map([...leaseIds].map((id) => [id, 1])));
    expect(await doubleBookings(pool)).toEqual([]);
    for (const row of live) {
      const lease = await (await startedLeaseWorkflow(stack(), row.id)).handle.query(getLease);
      expect({ status: lease.status, version: lease.version }).toEqual({ status: 'PENDING', version: Number(row.version) });
    }
  }, 180_000);
});
