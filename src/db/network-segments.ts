/**
 * Network segments enrolled for reservation (table `network_segments`, issue 45): a VLAN tag of a
 * physical network (or a VXLAN tag), with extra capabilities as hosts have, kept as one JSON object.
 * Their bookings are the calendar's (./network-segment-allocations.ts).
 */
import type { PoolClient } from 'pg';
import type { Pool } from './pool';

type Queryable = Pool | PoolClient;

export type NetworkType = 'vlan' | 'vxlan';

export interface NetworkSegmentRecord {
  id: string;
  network_type: NetworkType;
  /** Null for a VXLAN segment. */
  physical_network: string | null;
  /** The tag, as text. */
  segment_id: string;
  capabilities: Record<string, string>;
  created_at: Date;
  updated_at: Date;
}

const COLUMNS = 's.id::text, s.network_type, s.physical_network, s.segment_id, s.capabilities, s.created_at, s.updated_at';

export interface NewNetworkSegment {
  id: string;
  networkType: NetworkType;
  physicalNetwork: string | null;
  segmentId: string;
  capabilities: Record<string, string>;
}

/** Enrols a segment; undefined when its tag is enrolled already (network_segments_one_per_tag). */
export async function insertNetworkSegment(db: Queryable, segment: NewNetworkSegment): Promise<NetworkSegmentRecord | undefined> {
  const { rows } = await db.query<NetworkSegmentRecord>(
    `INSERT INTO network_segments AS s (id, network_type, physical_network, segment_id, capabilities) VALUES ($1, $2, $3, $4, $5)
     ON CONFLICT DO NOTHING RETURNING ${COLUMNS}`,
    [segment.id, segment.networkType, segment.physicalNetwork, segment.segmentId, JSON.stringify(segment.capabilities)],
  );
  return rows[0];
}

/** Every enrolled segment, in the order of their type, physical network and tag (numerically). */
export async function listNetworkSegments(db: Queryable): Promise<NetworkSegmentRecord[]> {
  const { rows } = await db.query<NetworkSegmentRecord>(
    `SELECT ${COLUMNS} FROM network_segments s ORDER BY s.network_type, s.physical_network NULLS FIRST, length(s.segment_id), s.segment_id`,
  );
  return rows;
}

export async function getNetworkSegment(db: Queryable, id: string): Promise<NetworkSegmentRecord | undefined> {
  const { rows } = await db.query<NetworkSegmentRecord>(`SELECT ${COLUMNS} FROM network_segments s WHERE s.id = $1`, [id]);
  return rows[0];
}

/** Locks the segment's row for the rest of the transaction (a removal against a concurrent booking); false when there is none. */
export async function lockNetworkSegment(client: PoolClient, id: string): Promise<boolean> {
  const { rowCount } = await client.query('SELECT 1 FROM network_segments WHERE id = $1 FOR UPDATE', [id]);
  return (rowCount ?? 0) > 0;
}

/** Merges capabilities into the segment's (the others stay); the segment as it is now, undefined when gone. */
export async function setNetworkSegmentCapabilities(db: Queryable, id: string, capabilities: Record<string, string>): Promise<NetworkSegmentRecord | undefined> {
  const { rows } = await db.query<NetworkSegmentRecord>(
    `UPDATE network_segments s SET capabilities = s.capabilities || $2::jsonb, updated_at = now() WHERE s.id = $1 RETURNING ${COLUMNS}`,
    [id, JSON.stringify(capabilities)],
  );
  return rows[0];
}

/** Removes the segment; its bookings must be gone first (the allocations refer to it). */
export async function deleteNetworkSegment(client: PoolClient, id: string): Promise<boolean> {
  const { rowCount } = await client.query('DELETE FROM network_segments WHERE id = $1', [id]);
  return (rowCount ?? 0) > 0;
}
