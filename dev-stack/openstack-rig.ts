/**
 * The loopback OpenStack (scripts/openstack/) as part of the dev stack: brought up by its own
 * up.sh (idempotent: a healthy rig is reused, and then left running at the end), its hosts
 * enrolled into leasekeeper's pool, stopped with down.sh only when this run started it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { loadCredentials, openStackClients, type OpenStackClients, type OpenStackClientsOptions, type PasswordCredentials } from '../src/openstack';
import { REPO_ROOT } from '../src/paths';
import { ManagedProcess } from './processes';

export const RIG_SCRIPTS = path.join(REPO_ROOT, 'scripts', 'openstack');
/** The rig's cloud with admin rights, in the clouds.yaml up.sh writes. */
export const RIG_ADMIN_CLOUD = 'leasekeeper-admin';

export function rigDir(env: NodeJS.ProcessEnv = process.env): string {
  return env.LK_OPENSTACK_DIR || path.join(REPO_ROOT, '.data', 'openstack');
}

/** The variables up.sh wrote to `<rig>/env.sh` (OS_AUTH_URL, LK_NOVA_URL, LK_OS_COMPUTE_HOSTS…). */
export function readRigEnv(dir: string): Record<string, string> {
  const vars: Record<string, string> = {};
  for (const line of fs.readFileSync(path.join(dir, 'env.sh'), 'utf8').split('\n')) {
    const match = /^export ([A-Z0-9_]+)=(?:"([^"]*)"|(\S*))$/.exec(line.trim());
    if (match?.[1]) vars[match[1]] = match[2] ?? match[3] ?? '';
  }
  return vars;
}

/** Which cloud `npm start` serves: none, the one the environment names, or the loopback rig. */
export type CloudChoice = { kind: 'none'; why: string } | { kind: 'external'; what: string } | { kind: 'rig' };

export function chooseCloud(env: NodeJS.ProcessEnv, isRoot: boolean): CloudChoice {
  const asked = env.LK_OPENSTACK ?? '';
  if (asked !== '' && asked !== 'none' && asked !== 'rig') {
    throw new Error(`LK_OPENSTACK=${JSON.stringify(asked)}: expected "none" (no cloud) or "rig" (the loopback OpenStack); unset, the rig is used unless OS_CLOUD or OS_AUTH_URL names a cloud`);
  }
  if (asked === 'none') return { kind: 'none', why: 'LK_OPENSTACK=none' };
  if (asked === '' && (env.OS_CLOUD || env.OS_AUTH_URL)) return { kind: 'external', what: env.OS_CLOUD ? `OS_CLOUD=${env.OS_CLOUD}` : `OS_AUTH_URL=${env.OS_AUTH_URL}` };
  if (!isRoot) return { kind: 'none', why: 'the loopback OpenStack runs as root (its MariaDB and RabbitMQ): run npm start as root for it, or name a cloud with OS_CLOUD' };
  return { kind: 'rig' };
}

export interface Rig {
  dir: string;
  /** False when a healthy rig was already running: it is left running at the end. */
  startedHere: boolean;
  /** The fake compute hosts (fake-1…). */
  hosts: string[];
  /** What the API and the worker need to reach it as the admin, and its Nova's notifications. */
  env: Record<string, string>;
}

/**
 * Runs up.sh (its output prefixed `openstack|`). `track` is given the running up.sh, so that a
 * stop asked meanwhile can interrupt it.
 */
export async function bringUpRig(track: (proc: ManagedProcess) => void): Promise<Rig> {
  const dir = rigDir();
  const up = new ManagedProcess({ name: 'openstack', command: 'bash', args: [path.join(RIG_SCRIPTS, 'up.sh')], env: { ...process.env, LK_OPENSTACK_DIR: dir }, echo: true });
  track(up);
  const code = await up.exited;
  if (code !== 0) throw new Error(`the loopback OpenStack did not come up (up.sh exit ${code}); its logs: ${path.join(dir, 'logs')}\n${up.tail()}`);
  // up.sh's last lines: this, then how to use the rig.
  const reused = up.tail().includes('OpenStack rig already up and healthy.');
  const vars = readRigEnv(dir);
  return {
    dir,
    startedHere: !reused,
    hosts: (vars.LK_OS_COMPUTE_HOSTS ?? '').split(/\s+/).filter(Boolean),
    env: {
      OS_CLIENT_CONFIG_FILE: path.join(dir, 'clouds.yaml'),
      OS_CLOUD: RIG_ADMIN_CLOUD,
      // The host monitor wakes on Nova's notifications (a rig from before they were on has none; one set by the caller stays).
      ...(vars.LK_NOVA_NOTIFICATIONS_URL && !process.env.LK_NOVA_NOTIFICATIONS_URL ? { LK_NOVA_NOTIFICATIONS_URL: vars.LK_NOVA_NOTIFICATIONS_URL } : {}),
    },
  };
}

/** Stops the rig's processes (down.sh: TERM, bounded wait, KILL). */
export async function stopRig(dir: string): Promise<void> {
  const down = new ManagedProcess({ name: 'openstack', command: 'bash', args: [path.join(RIG_SCRIPTS, 'down.sh')], env: { ...process.env, LK_OPENSTACK_DIR: dir }, echo: true });
  await down.exited;
}

export interface Enrolment {
  enrolled: string[];
  /** Enrolled by an earlier run (the data dir outlives the rig). */
  already: string[];
}

/**
 * Enrols the rig's hosts through the API (`POST /v1/os-hosts`, as an operator would), as the
 * admin (`headers`: none in noauth mode, a rig admin token in keystone mode). Hosts an earlier
 * run enrolled are left as they are, unless this start brought the rig up (`startedHere`: a new
 * cloud): then `addToPool` puts them into its pool aggregate.
 */
export async function enrolRigHosts(
  apiUrl: string,
  rig: Pick<Rig, 'hosts' | 'startedHere'>,
  headers: Record<string, string>,
  addToPool: (hosts: string[]) => Promise<void>,
): Promise<Enrolment> {
  const result: Enrolment = { enrolled: [], already: [] };
  for (const name of rig.hosts) {
    const res = await fetch(`${apiUrl}/v1/os-hosts`, { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify({ name }) });
    const text = await res.text();
    if (res.status === 201) result.enrolled.push(name);
    else if (res.status === 409 && text.includes('already reservable')) result.already.push(name);
    else throw new Error(`enrolling ${name}: HTTP ${res.status} ${text.slice(0, 300)}`);
  }
  if (rig.startedHere && result.already.length > 0) await addToPool(result.already);
  return result;
}

// ---------------------------------------------------------------------------------------------
// Clients of the rig's clouds (clouds.yaml), for the tests and the benchmarks against it.

export const RIG_DIR = rigDir();
export const CLOUDS_FILE = path.join(RIG_DIR, 'clouds.yaml');

export type RigCloud = 'leasekeeper-admin' | 'leasekeeper-project-a' | 'leasekeeper-project-b';

function requireRig(): void {
  if (!fs.existsSync(CLOUDS_FILE)) {
    throw new Error(`${CLOUDS_FILE} is missing: the OpenStack rig is not up (bash scripts/openstack/up.sh)`);
  }
}

/** The rig's credentials for one of its clouds. */
export function rigCredentials(cloud: RigCloud): PasswordCredentials {
  requireRig();
  const credentials = loadCredentials({ cloud, cloudsFiles: [CLOUDS_FILE], env: {} });
  if (credentials.type !== 'password') throw new Error(`${cloud} in ${CLOUDS_FILE} is not a password cloud`);
  return credentials;
}

/** Clients for one of the rig's clouds (admin, project-a, project-b). */
export function rigClients(cloud: RigCloud, options: Omit<OpenStackClientsOptions, 'cloud' | 'cloudsFiles'> = {}): OpenStackClients {
  return openStackClients({ credentials: rigCredentials(cloud), timeoutMs: 30_000, ...options });
}

/** The variables up.sh wrote to env.sh (LK_NOVA_URL, LK_PLACEMENT_URL, …). */
export function rigEnv(): Record<string, string> {
  requireRig();
  return readRigEnv(RIG_DIR);
}
