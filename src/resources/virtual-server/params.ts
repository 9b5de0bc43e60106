/** The `virtual:server` reservation's parameters, as blazarclient sends them. */
import { z } from 'zod';
import { propertyQueryParam } from '../shared/params';

export const END_ACTIONS = ['snapshot_and_delete', 'delete', 'shelve'] as const;
export type ServerEndAction = (typeof END_ACTIONS)[number];

/** A property query over the host (`$hypervisor_hostname`, `$host`, its Placement traits). */
const hostQuery = propertyQueryParam('["=", "$hypervisor_hostname", "compute-3"]');

const NETWORKS_HINT = 'expected "auto", "none" or a list of network ids';

export const virtualServerParams = z
  .strictObject({
    /** An existing server of the lessee's project: shelved until the start, unshelved onto the reserved host. */
    server_id: z.uuid({ error: 'expected the id (a UUID) of a server of your project' }).nullish(),
    /** Or a server that leasekeeper creates at the start (in the lessee's project, on the reserved host) from a flavor and an image. */
    flavor_id: z.string().min(1).max(255).nullish(),
    image_id: z.uuid({ error: 'expected the id (a UUID) of an image' }).nullish(),
    /** The created server's networks, as Nova takes them (default "auto"). */
    networks: z
      .union([z.enum(['auto', 'none']), z.array(z.uuid({ error: 'expected a network id (a UUID)' })).min(1)], { error: NETWORKS_HINT })
      .nullish(),
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
  })
  .superRefine((p, issues) => {
    const creating = Boolean(p.flavor_id || p.image_id || p.networks);
    if (p.server_id && creating) issues.addIssue({ code: 'custom', path: ['server_id'], message: 'give either server_id, or flavor_id and image_id (with networks), not both' });
    else if (!p.server_id && !(p.flavor_id && p.image_id)) {
      issues.addIssue({ code: 'custom', path: [p.flavor_id ? 'image_id' : p.image_id ? 'flavor_id' : 'server_id'], message: 'give server_id, or flavor_id and image_id' });
    }
    if (!p.server_id && p.on_cancel === 'delete') issues.addIssue({ code: 'custom', path: ['on_cancel'], message: 'on_cancel applies to an existing server (server_id)' });
  });

export type VirtualServerParams = z.output<typeof virtualServerParams>;
