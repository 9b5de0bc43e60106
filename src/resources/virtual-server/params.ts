/** The `virtual:server` reservation's parameters, as blazarclient sends them. */
import { z } from 'zod';
import { parsePropertyQuery, PropertyQueryError } from '../../domain/property-query';

export const END_ACTIONS = ['snapshot_and_delete', 'delete', 'shelve'] as const;
export type ServerEndAction = (typeof END_ACTIONS)[number];

/** A property query over the host (`$hypervisor_hostname`, `$host`, its Placement traits), kept as the JSON text the user gave. */
const hostQuery = z
  .union([z.string(), z.array(z.unknown())], { error: 'expected a JSON query such as ["=", "$hypervisor_hostname", "compute-3"]' })
  .nullish()
  .transform((value, ctx) => {
    const text = value === null || value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
    try {
      parsePropertyQuery(text);
    } catch (err) {
      if (!(err instanceof PropertyQueryError)) throw err;
      ctx.addIssue({ code: 'custom', message: err.message });
      return z.NEVER;
    }
    return text;
  });

export const virtualServerParams = z.strictObject({
  /** An existing server of the lessee's project: shelved until the start, unshelved onto the reserved host. */
  server_id: z.uuid({ error: 'expected the id (a UUID) of a server of your project' }),
  /** At the end: an image of the server then delete it, delete it, or leave it shelved for its owner. */
  on_end: z
    .enum(END_ACTIONS, { error: 'expected "snapshot_and_delete", "delete" or "shelve"' })
    .nullish()
    .transform((v) => v ?? 'snapshot_and_delete'),
  /** Deleting the lease before it starts: give the server back (unshelved wherever Nova chooses), or delete it. */
  on_cancel: z
    .enum(['unshelve', 'delete'], { error: 'expected "unshelve" or "delete"' })
    .nullish()
    .transform((v) => v ?? 'unshelve'),
  /** At the start, if on-demand servers took the reserved host's room: move to another host with room, fail, or the deployment's choice. */
  host_full: z
    .enum(['default', 'move', 'fail'], { error: 'expected "default", "move" or "fail"' })
    .nullish()
    .transform((v) => v ?? 'default'),
  resource_properties: hostQuery,
});

export type VirtualServerParams = z.output<typeof virtualServerParams>;
