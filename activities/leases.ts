/**
 * The lease's row in PostgreSQL, written only by the lease's own workflow. Every write carries the
 * lease's version, so a retried or late write of an older state changes nothing (idempotent).
 */
import { DatabaseError } from 'pg';
import { ApplicationFailure } from '@temporalio/common';
import { leaseConflict, LeaseErrorType, type Lease } from '../src/domain/lease';
import { isLeaseDeleted } from '../src/db/leases';
import type { ActivityDeps } from './deps';

const ENDED = ['TERMINATED', 'ERROR'];

function resourceKeys(lease: Lease): string[] {
  return [...new Set(lease.reservations.flatMap((r) => r.resourceKeys ?? []))].sort();
}

export function leaseActivities({ pool }: ActivityDeps) {
  return {
    async recordLease(lease: Lease): Promise<void> {
      try {
        const { rowCount } = await pool.query(
          `INSERT INTO leases (id, name, project_id, user_id, status, start_at, end_at, version, resource_keys, document, created_at, updated_at)
           VALUES ($1, $2, $3, $4, $5, to_timestamp($6 / 1000.0), to_timestamp($7 / 1000.0), $8, $9, $10, to_timestamp($11 / 1000.0), to_timestamp($12 / 1000.0))
           ON CONFLICT (id) DO UPDATE SET
             name = EXCLUDED.name, status = EXCLUDED.status, start_at = EXCLUDED.start_at, end_at = EXCLUDED.end_at,
             version = EXCLUDED.version, resource_keys = EXCLUDED.resource_keys, document = EXCLUDED.document, updated_at = EXCLUDED.updated_at
           WHERE leases.version < EXCLUDED.version AND leases.deleted_at IS NULL`,
          [lease.id, lease.name, lease.projectId, lease.userId, lease.status, lease.startMs, lease.endMs, lease.version, resourceKeys(lease), lease, lease.createdMs, lease.updatedMs],
        );
        // Nothing written: a stale retry (fine), or the lease was deleted — a new workflow under a
        // deleted lease's id (its Idempotency-Key reused) must not live on with no row: final.
        if (rowCount === 0 && (await isLeaseDeleted(pool, lease.id))) {
          throw ApplicationFailure.nonRetryable(`Lease ${lease.id}, created with this Idempotency-Key, was deleted: use another key for a new lease`, LeaseErrorType.deleted);
        }
      } catch (err) {
        if (err instanceof DatabaseError && err.code === '23505' && err.constraint === 'leases_live_name') {
          throw leaseConflict(`a lease named "${lease.name}" already exists in project ${lease.projectId}`);
        }
        throw err;
      }
    },

    async recordLeaseDeleted(lease: Lease): Promise<void> {
      await pool.query(
        `UPDATE leases SET deleted_at = now(), status = 'DELETED', version = $2, updated_at = now()
         WHERE id = $1 AND deleted_at IS NULL`,
        [lease.id, lease.version],
      );
    },

    /** Live leases that hold one of `keys` and started before `startMs`: they must end before this lease starts. */
    async findPredecessors(input: { leaseId: string; keys: string[]; startMs: number }): Promise<string[]> {
      const { rows } = await pool.query<{ id: string }>(
        `SELECT id FROM leases
         WHERE deleted_at IS NULL AND id <> $1 AND resource_keys && $2 AND start_at < to_timestamp($3 / 1000.0)
           AND status <> ALL ($4)`,
        [input.leaseId, input.keys, input.startMs, ENDED],
      );
      return rows.map((row) => row.id);
    },

    /**
     * Later leases on one of `keys` (starting after `startMs`): they are told when this lease has
     * ended. `waitingOnly`: just those already waiting in STARTING (few; the status index finds
     * them), not every PENDING lease booked after this one.
     */
    async findSuccessors(input: { leaseId: string; keys: string[]; startMs: number; waitingOnly?: boolean }): Promise<string[]> {
      const { rows } = await pool.query<{ id: string }>(
        `SELECT id FROM leases
         WHERE deleted_at IS NULL AND id <> $1 AND resource_keys && $2 AND start_at > to_timestamp($3 / 1000.0)
           AND status = ANY ($4)`,
        [input.leaseId, input.keys, input.startMs, input.waitingOnly ? ['STARTING'] : ['PENDING', 'STARTING']],
      );
      return rows.map((row) => row.id);
    },
  };
}
