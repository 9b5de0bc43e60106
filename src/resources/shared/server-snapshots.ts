/**
 * The `snapshot` before-end action: an image of every server on the lease's hosts, named after the
 * server and the lease, carrying the lease in its metadata. Idempotent: an image this lease already
 * made of a server (same name and lease property) is not made again. Waits for the image record,
 * not for `active` (some drivers, like Nova's fake one, never upload bytes).
 */
import type { ReportProgress } from '../../domain/resource-plugin';
import type { GlanceClient, NovaClient, Server } from '../../openstack';

export interface SnapshotRequest extends SnapshotOwner {
  hosts: string[];
  /** On these hosts only this project's servers are the lease's (a borrowed host: its lender's stray server is not, issue 43). */
  onlyProject?: { projectId: string; hosts: Set<string> };
  /** Called after each image: snapshotting many servers is long. */
  progress: ReportProgress;
}

export function snapshotName(serverName: string, leaseName: string): string {
  return `${serverName}-${leaseName}-before-end`.slice(0, 255);
}

export interface SnapshotOwner {
  leaseId: string;
  leaseName: string;
  reservationId: string;
}

/** An image of one server, once per lease (found again by name and lease when retried). */
export async function snapshotServer(nova: NovaClient, glance: GlanceClient, server: Pick<Server, 'id' | 'name'>, owner: SnapshotOwner): Promise<string> {
  const imageId = (await findSnapshot(glance, server.name, owner.leaseName, owner.leaseId)) ?? (
    await nova.createImage(server.id, snapshotName(server.name, owner.leaseName), {
      leasekeeper_lease: owner.leaseId,
      leasekeeper_reservation: owner.reservationId,
      leasekeeper_server: server.id,
    })
  ).imageId;
  // The snapshot is done when the server's task (image_snapshot, image_uploading) is over: deleting
  // the server before that makes Nova abort the snapshot and delete the image.
  await nova.waitForServer(server.id, (s) => s['OS-EXT-STS:task_state'] === null, { timeoutMs: 10 * 60_000, failOnError: false });
  await glance.waitForImage(imageId, () => true, { timeoutMs: 120_000 });
  return imageId;
}

/** The image this lease already made of the server, if any. */
export async function findSnapshot(glance: GlanceClient, serverName: string, leaseName: string, leaseId: string): Promise<string | undefined> {
  return (await glance.listImages({ name: snapshotName(serverName, leaseName), visibility: 'all' })).find((image) => image.leasekeeper_lease === leaseId)?.id;
}

export async function snapshotServersOnHosts(nova: NovaClient, glance: GlanceClient, request: SnapshotRequest): Promise<string[]> {
  const filterOf = (host: string) => (request.onlyProject?.hosts.has(host) ? { all_tenants: true, host, project_id: request.onlyProject.projectId } : { all_tenants: true, host });
  const servers = (await Promise.all(request.hosts.map((host) => nova.listServers(filterOf(host))))).flat();
  return snapshotServers(nova, glance, servers, request, request.progress);
}

/** An image of each server, one after the other, the progress told after each. */
export async function snapshotServers(nova: NovaClient, glance: GlanceClient, servers: Array<Pick<Server, 'id' | 'name'>>, owner: SnapshotOwner, progress: ReportProgress): Promise<string[]> {
  const imageIds: string[] = [];
  for (const server of servers) {
    imageIds.push(await snapshotServer(nova, glance, server, owner));
    progress({ snapshots: imageIds.length, of: servers.length });
  }
  return imageIds;
}
