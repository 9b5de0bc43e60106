/** The `virtual:instance` reservation's parameters, as blazarclient sends them (numbers may come as strings, `affinity` as "None"). */
import { z } from 'zod';
import { beforeEndParam, preemptibleParam, propertyQueryParam, whole } from '../shared/params';

/** The most slots one reservation may ask for: each is a row in the calendar and, at the end, a server to delete. */
export const MAX_SLOTS = 1_000;

/** Nova's own limits on a flavor (its API refuses more). */
const MAX_VCPUS = 2 ** 31 - 1;

// As oslo's strutils.bool_from_string reads them (Blazar parses `affinity` with it).
const TRUE_WORDS = ['1', 't', 'true', 'on', 'y', 'yes'];
const FALSE_WORDS = ['0', 'f', 'false', 'off', 'n', 'no'];
const NONE_WORDS = ['none', ''];

/** `true`: all slots on one host; `false`: each on a different host; `null`: they may share hosts. */
export const affinityParam = z
  .union([z.boolean(), z.string().max(8), z.null()], { error: 'expected True, False or None' })
  .optional()
  .transform((value, ctx) => {
    if (value === undefined || value === null || typeof value === 'boolean') return value ?? null;
    const word = value.trim().toLowerCase();
    if (TRUE_WORDS.includes(word)) return true;
    if (FALSE_WORDS.includes(word)) return false;
    if (NONE_WORDS.includes(word)) return null;
    ctx.addIssue({ code: 'custom', message: 'expected True, False or None', params: { blazar: 'Malformed parameter affinity (must be a bool value or None)' } });
    return z.NEVER;
  });

export const virtualInstanceParams = z.strictObject({
  vcpus: whole('vCPUs', 1, MAX_VCPUS),
  memory_mb: whole('MiB', 1, 2 ** 31 - 1),
  disk_gb: whole('GiB', 0, 2 ** 31 - 1),
  amount: whole('instances', 1, MAX_SLOTS),
  affinity: affinityParam,
  resource_properties: propertyQueryParam('["==", "$gpu", "true"]'),
  /** Before the end: nothing (''), an image of every server of the flavor, a notice, or the deployment's default. */
  before_end: beforeEndParam,
  /** Preemptible (issue 43): slots booked only where no regular booking holds them, cut short by a regular lease that needs them (docs/api.md, "Preemptible leases"). */
  preemptible: preemptibleParam,
});

export type VirtualInstanceParams = z.output<typeof virtualInstanceParams>;

/** The slot's footprint in Placement's resource classes. */
export function slotAmounts(params: Pick<VirtualInstanceParams, 'vcpus' | 'memory_mb' | 'disk_gb'>): Record<string, number> {
  return { VCPU: params.vcpus, MEMORY_MB: params.memory_mb, DISK_GB: params.disk_gb };
}
