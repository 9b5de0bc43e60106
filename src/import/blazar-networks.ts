/**
 * Chameleon's network segment reservations in the Blazar import (issue 45): its enrolled segments
 * become leasekeeper's (found by their tag, else enrolled with Blazar's id where free), and a
 * lease's `network` reservation a booking of the segment Blazar allocated to it, with its
 * parameters held to the API's rules. An active reservation's Neutron network, which Blazar made
 * without leasekeeper's tags, is adopted at --apply through `ImportDeps.adoptNetwork`
 * (src/resources/network-segment/adopt.ts). Upstream Blazar has no network tables: the report says so.
 */
import { randomUUID } from 'node:crypto';
import { getNetworkSegment, insertNetworkSegment, listNetworkSegments, type NetworkSegmentRecord } from '../db/network-segments';
import type { Pool } from '../db/pool';
import { isUuid } from '../domain/lease';
import { segmentName } from '../resources/network-segment/calendar';
import { checkSegmentFields, MAX_SEGMENT_CAPABILITIES, type SegmentFields } from '../resources/network-segment/inventory';
import { networkSegmentParams, SEGMENT_FIELDS, type NetworkSegmentParams } from '../resources/network-segment/params';
import { checkCapabilities } from '../resources/physical-host/inventory';
import type { BlazarNetworkTables } from './blazar-source';

/** A Chameleon segment as leasekeeper will hold it: checked, and found here or to enrol. */
export interface SegmentPlan {
  blazarId: string;
  name: string;
  fields: SegmentFields;
  capabilities: Record<string, string>;
  /** leasekeeper's id (unknown in a dry run for a segment given a new one). */
  id?: string;
  action: 'create' | 'present';
  notes: string[];
}

/** A Chameleon segment whose row breaks the API's rules: not enrolled, nor any lease that holds it. */
export interface SegmentLeftOut {
  blazarId: string;
  name: string;
  reason: string;
}

/** A lease's network reservation, as it will be booked. */
export interface NetworkReservationPlan {
  id: string;
  params: NetworkSegmentParams;
  segmentBlazarId: string;
  segmentName: string;
  /** The segment as the lease JSON shows it. */
  segment: { network_type: string; physical_network: string | null; segment_id: string };
  /** Neutron's network Blazar made at the start (an active lease's), else null. */
  networkId: string | null;
}

const fieldsOf = (s: BlazarNetworkTables['segments'][number]) => ({ network_type: s.network_type, physical_network: s.physical_network, segment_id: s.segment_id });

/** What a thrown check says (the API's 400 sentences). */
const messageOf = (err: unknown) => (err instanceof Error ? err.message : String(err));

/** Chameleon's segments checked against the API's rules: those it takes, and those it does not with why. */
export function checkSegments(tables: BlazarNetworkTables | undefined): { segments: Map<string, Omit<SegmentPlan, 'action' | 'notes' | 'id'>>; problems: Map<string, SegmentLeftOut> } {
  const segments = new Map<string, Omit<SegmentPlan, 'action' | 'notes' | 'id'>>();
  const problems = new Map<string, SegmentLeftOut>();
  const capabilitiesOf = new Map<string, Record<string, string>>();
  for (const c of tables?.capabilities ?? []) capabilitiesOf.set(c.network_id, { ...capabilitiesOf.get(c.network_id), [c.property_name]: c.capability_value });
  for (const row of tables?.segments ?? []) {
    // Named as Blazar holds it (its type may be one leasekeeper does not take).
    const name = `${row.network_type}:${row.physical_network ? `${row.physical_network}:` : ''}${row.segment_id}`;
    try {
      const fields = checkSegmentFields(fieldsOf(row));
      const raw = capabilitiesOf.get(row.id) ?? {};
      const clashing = Object.keys(raw).filter((k) => (SEGMENT_FIELDS as readonly string[]).includes(k));
      if (clashing.length > 0) throw new Error(`${clashing.join(', ')}: a capability named as a segment field`);
      if (Object.keys(raw).length > MAX_SEGMENT_CAPABILITIES) throw new Error(`more than ${MAX_SEGMENT_CAPABILITIES} extra capabilities`);
      segments.set(row.id, { blazarId: row.id, name: segmentName({ network_type: fields.networkType, physical_network: fields.physicalNetwork, segment_id: fields.segmentId }), fields, capabilities: checkCapabilities(raw) });
    } catch (err) {
      problems.set(row.id, { blazarId: row.id, name, reason: messageOf(err) });
    }
  }
  return { segments, problems };
}

/** Per Blazar segment, leasekeeper's segment on the same tag, if enrolled already. */
export async function segmentsPresent(pool: Pool, segments: Iterable<Pick<SegmentPlan, 'blazarId' | 'fields'>>): Promise<Map<string, NetworkSegmentRecord>> {
  const enrolled = await listNetworkSegments(pool);
  const present = new Map<string, NetworkSegmentRecord>();
  for (const s of segments) {
    const same = enrolled.find((e) => e.network_type === s.fields.networkType && e.physical_network === s.fields.physicalNetwork && e.segment_id === s.fields.segmentId);
    if (same) present.set(s.blazarId, same);
  }
  return present;
}

/** The id a new segment is enrolled with: Blazar's where it is a UUID not taken here, else a new one. */
export async function newSegmentId(pool: Pool, blazarId: string): Promise<string | undefined> {
  return isUuid(blazarId) && !(await getNetworkSegment(pool, blazarId)) ? blazarId : undefined;
}

/** Enrols the planned segment (its tag taken meanwhile: the one there now). */
export async function enrolSegment(pool: Pool, plan: SegmentPlan): Promise<string> {
  const enrolled = await insertNetworkSegment(pool, { id: plan.id ?? randomUUID(), ...plan.fields, capabilities: plan.capabilities });
  if (enrolled) return enrolled.id;
  const present = (await segmentsPresent(pool, [plan])).get(plan.blazarId);
  if (!present) throw new Error(`segment ${plan.name} could be neither enrolled nor found`);
  return present.id;
}

/**
 * A reservation's network row and its allocation as leasekeeper would have booked them, or why
 * not (`rules`: its rows break the API's rules, to fix in Chameleon's Blazar).
 */
export function planNetworkReservation(
  tables: BlazarNetworkTables,
  checked: ReturnType<typeof checkSegments>,
  reservationId: string,
): { plan: NetworkReservationPlan } | { problem: string; rules: boolean } {
  const row = tables.reservations.find((r) => r.reservation_id === reservationId);
  if (!row) return { problem: `reservation ${reservationId} has no network_reservations row`, rules: false };
  const parsed = networkSegmentParams.safeParse({
    network_name: row.network_name ?? undefined,
    network_description: row.network_description,
    network_properties: row.network_properties ?? '',
    resource_properties: row.resource_properties ?? '',
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { problem: `reservation ${reservationId}: ${issue.path.join('.') || 'parameters'}: ${issue.message}`, rules: true };
  }
  const allocated = tables.allocations.filter((a) => a.reservation_id === reservationId);
  if (allocated.length !== 1) return { problem: `reservation ${reservationId} holds ${allocated.length} network segments in Blazar, where a network reservation holds one`, rules: false };
  const segmentId = allocated[0].network_id;
  const problem = checked.problems.get(segmentId);
  if (problem) return { problem: `reservation ${reservationId} holds network segment ${problem.name}, which is not importable: ${problem.reason}`, rules: true };
  const segment = checked.segments.get(segmentId);
  if (!segment) return { problem: `reservation ${reservationId} holds network segment ${segmentId}, which Blazar's network_segments does not have`, rules: false };
  const { networkType, physicalNetwork, segmentId: tag } = segment.fields;
  return {
    plan: {
      id: reservationId,
      params: parsed.data,
      segmentBlazarId: segmentId,
      segmentName: segment.name,
      segment: { network_type: networkType, physical_network: physicalNetwork, segment_id: tag },
      networkId: row.network_id,
    },
  };
}
