/**
 * Idempotency-Keys and the create each was used for (030_series_state.sql): a lease create and a
 * series create each claim the key before anything is made, so that one key never makes both.
 */
import type { Pool } from './pool';

export type KeyedCreate = 'lease' | 'series';

/**
 * Claims the key for `kind`, or finds whom it was claimed for first; answers that kind. Two
 * statements: the read after a lost insert sees the winner's committed row (an insert that
 * conflicts with an uncommitted one waits for it).
 */
export async function claimIdempotencyKey(pool: Pool, keyId: string, kind: KeyedCreate): Promise<KeyedCreate> {
  const claimed = await pool.query<{ kind: KeyedCreate }>('INSERT INTO idempotency_keys (id, kind) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING RETURNING kind', [keyId, kind]);
  if (claimed.rows[0]) return claimed.rows[0].kind;
  const { rows } = await pool.query<{ kind: KeyedCreate }>('SELECT kind FROM idempotency_keys WHERE id = $1', [keyId]);
  return rows[0].kind;
}
