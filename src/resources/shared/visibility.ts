/**
 * Whether a project may use an image, a flavor or a network, decided as OpenStack decides it for
 * the project's own members. leasekeeper reads them, and creates servers in lessee projects, with
 * the service user's admin role, which sees everything: without these checks a member could boot
 * another project's private image or flavor, or attach to another project's network.
 * Each answers undefined alike for a missing thing and for another project's, so that a caller's
 * message never confirms that another project's private resource exists.
 */
import { ignoreNotFound, type Flavor, type GlanceClient, type Image, type Network, type NeutronClient, type NovaClient } from '../../openstack';

/**
 * Glance v2: a public or community image is everyone's; a shared one its owner's and its members'
 * (in any member status: the status only decides whether the image is listed, not whether the
 * member may use it); a private one its owner's only.
 */
export async function imageVisibleTo(glance: GlanceClient, imageId: string, projectId: string): Promise<Image | undefined> {
  const image = await ignoreNotFound(glance.getImage(imageId));
  if (!image) return undefined;
  if (image.visibility === 'public' || image.visibility === 'community' || image.owner === projectId) return image;
  if (image.visibility === 'shared' && (await ignoreNotFound(glance.getImageMember(image.id, projectId)))) return image;
  return undefined;
}

/** Nova: a public flavor is everyone's; a private one only the projects in its access list. */
export async function flavorVisibleTo(nova: NovaClient, flavorId: string, projectId: string): Promise<Flavor | undefined> {
  const flavor = await ignoreNotFound(nova.getFlavor(flavorId));
  if (!flavor) return undefined;
  if (flavor['os-flavor-access:is_public']) return flavor;
  const access = (await ignoreNotFound(nova.listFlavorAccess(flavor.id))) ?? [];
  return access.some((a) => a.tenant_id === projectId) ? flavor : undefined;
}

/**
 * Neutron: the project's own network, or one an RBAC `access_as_shared` policy shares with it or
 * with everyone (`*`: what `shared: true` is). Not the network's `shared` flag as the service user
 * reads it: Neutron computes that flag for the caller's project, not for the lessee's.
 */
export async function networkVisibleTo(neutron: NeutronClient, networkId: string, projectId: string): Promise<Network | undefined> {
  const network = await ignoreNotFound(neutron.getNetwork(networkId));
  if (!network) return undefined;
  if (network.project_id === projectId) return network;
  const policies = await neutron.listRbacPolicies({ object_type: 'network', object_id: network.id, action: 'access_as_shared' });
  return policies.some((p) => p.target_tenant === projectId || p.target_tenant === '*') ? network : undefined;
}
