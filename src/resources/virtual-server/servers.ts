/**
 * Nova actions on one leased server (`virtual:server`): shelve it until its lease starts, unshelve it
 * onto the reserved host, and at the end snapshot/delete/shelve it. Every action is idempotent: it
 * reads the server first and does only what is left, so a retry after a lost answer or a killed
 * worker picks up where the last try stopped. Nova's own transitions are awaited, never assumed.
 */
import { ApplicationFailure } from '@temporalio/common';
import { NotFoundError, serverHost, type GlanceClient, type NovaClient, type Server } from '../../openstack';
import { findSnapshot, snapshotServer, type SnapshotOwner } from '../shared/server-snapshots';

/** Nova's states from which a server can be shelved. */
const SHELVABLE = new Set(['ACTIVE', 'SHUTOFF', 'PAUSED', 'SUSPENDED']);
const SHELVED = new Set(['SHELVED', 'SHELVED_OFFLOADED']);
export const LEASABLE_STATUSES = [...SHELVABLE, ...SHELVED];

const TRANSITION_TIMEOUT_MS = 5 * 60_000;
const settled = (s: Server) => (s['OS-EXT-STS:task_state'] ?? null) === null;
/** Offloaded for good: Nova saves SHELVED_OFFLOADED before it clears the host, so wait for both. */
const offloaded = (s: Server) => s.status === 'SHELVED_OFFLOADED' && settled(s) && serverHost(s) === null;

/** The server, or undefined once it is gone. */
export async function findServer(nova: NovaClient, id: string): Promise<Server | undefined> {
  try {
    const server = await nova.getServer(id);
    return server.status === 'DELETED' ? undefined : server;
  } catch (err) {
    if (err instanceof NotFoundError) return undefined;
    throw err;
  }
}

async function settledServer(nova: NovaClient, id: string): Promise<Server | undefined> {
  const server = await findServer(nova, id);
  if (!server || settled(server)) return server;
  return nova.waitForServer(id, settled, { timeoutMs: TRANSITION_TIMEOUT_MS, failOnError: false });
}

function serverGone(id: string, when: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(`server ${id} no longer exists (deleted by its owner ${when}?)`, 'ServerGone');
}

/** Shelves and offloads the server: it keeps its disk, its host's capacity is free for others. */
export async function shelveAndOffload(nova: NovaClient, id: string): Promise<void> {
  try {
    await shelveAndOffloadOnce(nova, id);
  } catch (err) {
    if (err instanceof NotFoundError) throw serverGone(id, 'before the lease started'); // deleted while we shelved it
    throw err;
  }
}

async function shelveAndOffloadOnce(nova: NovaClient, id: string): Promise<void> {
  const server = await settledServer(nova, id);
  if (!server) throw serverGone(id, 'before the lease started');
  if (offloaded(server)) return;
  if (SHELVABLE.has(server.status)) await nova.shelve(id);
  else if (server.status === 'SHELVED') await nova.shelveOffload(id);
  else if (server.status !== 'SHELVED_OFFLOADED') {
    throw ApplicationFailure.nonRetryable(`server ${id} is ${server.status}: it cannot be shelved until the lease starts`, 'ServerNotShelvable');
  }
  // With shelved_offload_time ≠ 0 Nova stops at SHELVED: offload it ourselves.
  const shelved = await nova.waitForServer(id, (s) => SHELVED.has(s.status) && settled(s), { timeoutMs: TRANSITION_TIMEOUT_MS });
  if (shelved.status === 'SHELVED') await nova.shelveOffload(id);
  await nova.waitForServer(id, offloaded, { timeoutMs: TRANSITION_TIMEOUT_MS });
}

export type UnshelveResult = { ok: true; server: Server } | { ok: false; reason: string };

/**
 * Unshelves the server onto `host` and waits until it runs there. `ok: false` when Nova could not
 * place it (the scheduler refused the host: it stays SHELVED_OFFLOADED), so the caller can choose.
 */
export async function unshelveOnto(nova: NovaClient, id: string, host: string): Promise<UnshelveResult> {
  let server = await settledServer(nova, id);
  if (!server) throw serverGone(id, 'before the lease started');
  if (server.status === 'ACTIVE') return { ok: true, server }; // an earlier try got it there (or its owner did)
  if (server.status === 'SHELVED') {
    await nova.shelveOffload(id); // unshelving onto a chosen host needs an offloaded server
    server = await nova.waitForServer(id, offloaded, { timeoutMs: TRANSITION_TIMEOUT_MS });
  }
  if (server.status !== 'SHELVED_OFFLOADED') {
    throw ApplicationFailure.nonRetryable(`server ${id} is ${server.status}, not shelved: it cannot be started on the reserved host`, 'ServerNotShelved');
  }
  if (serverHost(server) !== null) server = await nova.waitForServer(id, offloaded, { timeoutMs: TRANSITION_TIMEOUT_MS });
  await nova.unshelve(id, { host });
  const after = await nova.waitForServer(id, settled, { timeoutMs: TRANSITION_TIMEOUT_MS, failOnError: false });
  if (after.status === 'ACTIVE') return { ok: true, server: after };
  if (after.status === 'SHELVED_OFFLOADED') return { ok: false, reason: after.fault?.message ?? `Nova did not place server ${id} on ${host} (no valid host)` };
  throw ApplicationFailure.nonRetryable(`unshelving server ${id} onto ${host} left it ${after.status}${after.fault ? `: ${after.fault.message}` : ''}`, 'UnshelveFailed');
}

/** A lease deleted before its start gives the server back: unshelved wherever Nova chooses. */
export async function unshelveAnywhere(nova: NovaClient, id: string): Promise<void> {
  const server = await settledServer(nova, id);
  if (!server || !SHELVED.has(server.status)) return; // gone, or already running again
  await nova.unshelve(id);
  await nova.waitForServer(id, settled, { timeoutMs: TRANSITION_TIMEOUT_MS, failOnError: false });
}

export async function deleteServerAndWait(nova: NovaClient, id: string): Promise<void> {
  if (!(await findServer(nova, id))) return;
  await nova.deleteServer(id).catch((err: unknown) => {
    if (!(err instanceof NotFoundError)) throw err;
  });
  await nova.waitForServerDeleted(id, { timeoutMs: TRANSITION_TIMEOUT_MS });
}

/** `snapshot_and_delete`: an image of the server (once per lease), then the server deleted. Returns the image id. */
export async function snapshotAndDelete(nova: NovaClient, glance: GlanceClient, id: string, serverName: string, owner: SnapshotOwner): Promise<string | undefined> {
  const server = await settledServer(nova, id);
  if (!server) return findSnapshot(glance, serverName, owner.leaseName, owner.leaseId); // deleted by an earlier try (or its owner)
  const imageId = await snapshotServer(nova, glance, server, owner);
  await deleteServerAndWait(nova, id);
  return imageId;
}

/** `shelve` at the end: the user keeps the server, shelved, without holding any host. */
export async function shelveForOwner(nova: NovaClient, id: string): Promise<void> {
  const server = await settledServer(nova, id);
  if (!server || SHELVED.has(server.status)) return;
  await shelveAndOffload(nova, id);
}
