/**
 * OpenStack credentials, the OpenStack way:
 *
 * - `clouds.yaml`, cloud chosen by `OS_CLOUD` (or the `cloud` option); the file is the first of
 *   `OS_CLIENT_CONFIG_FILE`, `./clouds.yaml`, `~/.config/openstack/clouds.yaml`,
 *   `/etc/openstack/clouds.yaml` (`.yml` too). A `secure.yaml` next to those (or
 *   `OS_CLIENT_SECURE_FILE`) is merged in, as openstacksdk does, so passwords can live apart.
 * - otherwise the `OS_*` variables: OS_AUTH_URL, OS_USERNAME (or OS_USER_ID), OS_PASSWORD,
 *   OS_PROJECT_NAME (or OS_PROJECT_ID), OS_USER_DOMAIN_NAME/_ID, OS_PROJECT_DOMAIN_NAME/_ID,
 *   OS_REGION_NAME, OS_INTERFACE.
 *
 * Everything is validated with zod; a missing or bad setting gives an OpenStackConfigError that
 * names it (`OS_PASSWORD is required`, `clouds.yaml … cloud 'x': auth.password is required`).
 */
import fs from 'node:fs';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { openStackSettingsFromEnv, type OpenStackEnvSettings } from '../config';
import { OpenStackConfigError, type ServiceType } from './errors';

export type EndpointInterface = 'public' | 'internal' | 'admin';

export const SERVICE_TYPES: readonly ServiceType[] = ['identity', 'compute', 'placement', 'network', 'image', 'baremetal'];

/** Keystone v3 password authentication, scoped to a project. */
export interface PasswordCredentials {
  type: 'password';
  /** Keystone URL, e.g. `http://127.0.0.1:15000/v3` (`/v3` is added when missing). */
  authUrl: string;
  username?: string;
  userId?: string;
  password: string;
  /** The user's domain, by name or id (default: id `default`). */
  userDomainName?: string;
  userDomainId?: string;
  projectName?: string;
  projectId?: string;
  /** The project's domain, by name or id (default: id `default`). */
  projectDomainName?: string;
  projectDomainId?: string;
  /** Region of the endpoints to use; any region when unset. */
  regionName?: string;
  /** Endpoint interface (default `public`). */
  interface?: EndpointInterface;
  /** Endpoints to use instead of the catalog's, per service type. */
  endpointOverride?: Partial<Record<ServiceType, string>>;
}

/** No Keystone: explicit endpoint URLs and, optionally, a fixed token. */
export interface StaticCredentials {
  type: 'static';
  endpoints: Partial<Record<ServiceType, string>>;
  token?: string;
  /** Sent with every request, e.g. `X-Project-Id`/`X-Roles` for services in noauth mode. */
  headers?: Record<string, string>;
}

export type OpenStackCredentials = PasswordCredentials | StaticCredentials;

export interface LoadCredentialsOptions {
  /** The cloud in clouds.yaml; default `OS_CLOUD`. */
  cloud?: string;
  /** The OS_* settings (default: src/config.ts's openStackSettingsFromEnv of `env`). */
  settings?: OpenStackEnvSettings;
  /** The environment src/config.ts reads them from when `settings` is not given (default: the process's). */
  env?: Record<string, string | undefined>;
  /** Where to look for clouds.yaml (default: the OpenStack search path). */
  cloudsFiles?: string[];
  /** The working directory for `./clouds.yaml` (default process.cwd()). */
  cwd?: string;
}

const nonEmpty = z.string().trim().min(1);
const url = z.string().trim().regex(/^https?:\/\/\S+$/, 'must be an http(s) URL');

function normalizeInterface(value: unknown): unknown {
  return typeof value === 'string' ? value.trim().replace(/URL$/, '') : value;
}
const interfaceSchema = z.preprocess(normalizeInterface, z.enum(['public', 'internal', 'admin'], { error: 'must be public, internal or admin' }));

const serviceKeys: Record<string, ServiceType> = {
  identity: 'identity',
  compute: 'compute',
  placement: 'placement',
  network: 'network',
  image: 'image',
  baremetal: 'baremetal',
};

/** Checks the combinations zod's object shape cannot express, naming the settings to set. */
function requireOneOf(
  ctx: z.RefinementCtx,
  values: Record<string, string | undefined>,
  names: [string, string],
  pathPrefix: string[],
): void {
  const [first, second] = names;
  if (values[first] === undefined && values[second] === undefined) {
    ctx.addIssue({ code: 'custom', message: `${first} or ${second} is required`, path: pathPrefix });
  }
}

const cloudAuthSchema = z
  .object({
    auth_url: url.optional(),
    username: nonEmpty.optional(),
    user_id: nonEmpty.optional(),
    password: z.coerce.string().min(1).optional(),
    project_name: nonEmpty.optional(),
    project_id: nonEmpty.optional(),
    tenant_name: nonEmpty.optional(),
    tenant_id: nonEmpty.optional(),
    user_domain_name: nonEmpty.optional(),
    user_domain_id: nonEmpty.optional(),
    project_domain_name: nonEmpty.optional(),
    project_domain_id: nonEmpty.optional(),
    domain_name: nonEmpty.optional(),
    domain_id: nonEmpty.optional(),
    token: nonEmpty.optional(),
  })
  .loose();

const cloudSchema = z
  .object({
    auth_type: z.enum(['password', 'v3password', 'none', 'noauth', 'admin_token', 'token', 'v3token']).default('password'),
    auth: cloudAuthSchema.default({}),
    region_name: nonEmpty.optional(),
    interface: interfaceSchema.optional(),
    identity_api_version: z.union([z.string(), z.number()]).optional(),
  })
  .loose();

type CloudEntry = z.infer<typeof cloudSchema>;

/** The settings the options give, or src/config.ts reads from their environment. */
const settingsOf = (options: Pick<LoadCredentialsOptions, 'settings' | 'env'>): OpenStackEnvSettings => options.settings ?? openStackSettingsFromEnv(options.env);

/** Where OpenStack looks for `<name>.yaml` (or `.yml`), in its order: the named file first, then the working directory, the user's and the system's. */
function configFileCandidates(name: 'clouds' | 'secure', first: string | undefined, home: string, cwd: string): string[] {
  const dirs = [cwd, path.join(home, '.config', 'openstack'), '/etc/openstack'];
  return [...(first ? [first] : []), ...dirs.flatMap((dir) => [path.join(dir, `${name}.yaml`), path.join(dir, `${name}.yml`)])];
}

/** The clouds.yaml search path, in OpenStack's order. */
export function cloudsFileCandidates(settings: Pick<OpenStackEnvSettings, 'cloudsFile' | 'home'>, cwd: string = process.cwd()): string[] {
  return configFileCandidates('clouds', settings.cloudsFile, settings.home, cwd);
}

function readYaml(file: string): unknown {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    throw new OpenStackConfigError(`cannot read ${file}: ${(error as Error).message}`);
  }
  try {
    return parseYaml(text) as unknown;
  } catch (error) {
    throw new OpenStackConfigError(`${file} is not valid YAML: ${(error as Error).message}`);
  }
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === 'object' && !Array.isArray(value);
}

function deepMerge(base: Record<string, unknown>, extra: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...base };
  for (const [key, value] of Object.entries(extra)) {
    const current = out[key];
    out[key] = isRecord(current) && isRecord(value) ? deepMerge(current, value) : value;
  }
  return out;
}

function formatIssues(issues: readonly z.core.$ZodIssue[], prefix: string, nameOf: (issuePath: string) => string): string {
  return issues
    .map((issue) => {
      const where = issue.path.map(String).join('.');
      const name = where === '' ? '' : nameOf(where);
      const message = issue.code === 'invalid_type' && /received undefined/.test(issue.message) ? 'is required' : issue.message;
      return `${prefix}${name === '' ? '' : `${name} `}${message}`;
    })
    .join('; ');
}

/** Reads one cloud from clouds.yaml (and secure.yaml) and turns it into credentials. */
export function credentialsFromCloudsYaml(cloud: string, options: Omit<LoadCredentialsOptions, 'cloud'> = {}): OpenStackCredentials {
  const settings = settingsOf(options);
  const cwd = options.cwd ?? process.cwd();
  const candidates = options.cloudsFiles ?? cloudsFileCandidates(settings, cwd);
  const file = candidates.find((candidate) => fs.existsSync(candidate));
  if (file === undefined) {
    throw new OpenStackConfigError(`OS_CLOUD is '${cloud}' but no clouds.yaml was found (looked at ${candidates.join(', ')}); set OS_CLIENT_CONFIG_FILE`);
  }
  const document = readYaml(file);
  const clouds = isRecord(document) ? document.clouds : undefined;
  if (!isRecord(clouds)) throw new OpenStackConfigError(`${file} has no 'clouds' mapping`);
  let entry = clouds[cloud];
  if (!isRecord(entry)) {
    throw new OpenStackConfigError(`cloud '${cloud}' (OS_CLOUD) is not in ${file}; it has ${Object.keys(clouds).join(', ') || 'no clouds'}`);
  }
  if (options.cloudsFiles === undefined) {
    const secureFile = configFileCandidates('secure', settings.secureFile, settings.home, cwd).find((candidate) => fs.existsSync(candidate));
    if (secureFile !== undefined) {
      const secure = readYaml(secureFile);
      const secureClouds = isRecord(secure) ? secure.clouds : undefined;
      const secureEntry = isRecord(secureClouds) ? secureClouds[cloud] : undefined;
      if (isRecord(secureEntry)) entry = deepMerge(entry, secureEntry);
    }
  }
  const prefix = `${file} cloud '${cloud}': `;
  const parsed = cloudSchema.safeParse(entry);
  if (!parsed.success) throw new OpenStackConfigError(formatIssues(parsed.error.issues, prefix, (p) => p));
  return cloudToCredentials(parsed.data, prefix);
}

function cloudToCredentials(cloud: CloudEntry, prefix: string): OpenStackCredentials {
  const overrides: Partial<Record<ServiceType, string>> = {};
  for (const [key, value] of Object.entries(cloud)) {
    const match = /^(\w+?)_endpoint_override$/.exec(key);
    const service = match ? serviceKeys[match[1] ?? ''] : undefined;
    if (service === undefined) continue;
    const checked = url.safeParse(value);
    if (!checked.success) throw new OpenStackConfigError(`${prefix}${key} must be an http(s) URL`);
    overrides[service] = checked.data;
  }
  const auth = cloud.auth;
  if (cloud.auth_type === 'none' || cloud.auth_type === 'noauth' || cloud.auth_type === 'admin_token') {
    if (Object.keys(overrides).length === 0) {
      throw new OpenStackConfigError(`${prefix}auth_type ${cloud.auth_type} needs <service>_endpoint_override settings (e.g. compute_endpoint_override)`);
    }
    return { type: 'static', endpoints: overrides, token: auth.token };
  }
  if (cloud.auth_type === 'token' || cloud.auth_type === 'v3token') {
    throw new OpenStackConfigError(`${prefix}auth_type ${cloud.auth_type} is not supported; use password (or none with endpoint overrides)`);
  }
  const settings = {
    authUrl: auth.auth_url,
    username: auth.username,
    userId: auth.user_id,
    password: auth.password,
    projectName: auth.project_name ?? auth.tenant_name,
    projectId: auth.project_id ?? auth.tenant_id,
    userDomainName: auth.user_domain_name ?? auth.domain_name,
    userDomainId: auth.user_domain_id ?? auth.domain_id,
    projectDomainName: auth.project_domain_name ?? auth.domain_name,
    projectDomainId: auth.project_domain_id ?? auth.domain_id,
    regionName: cloud.region_name,
    interface: cloud.interface,
  };
  return checkPassword(settings, prefix, {
    authUrl: 'auth.auth_url',
    username: 'auth.username',
    userId: 'auth.user_id',
    password: 'auth.password',
    projectName: 'auth.project_name',
    projectId: 'auth.project_id',
  }, overrides);
}

type PasswordSettings = Omit<PasswordCredentials, 'type' | 'authUrl' | 'password' | 'endpointOverride'> & {
  authUrl?: string;
  password?: string;
};

const passwordSchema = z
  .object({
    authUrl: url,
    username: nonEmpty.optional(),
    userId: nonEmpty.optional(),
    password: z.string().min(1),
    projectName: nonEmpty.optional(),
    projectId: nonEmpty.optional(),
    userDomainName: nonEmpty.optional(),
    userDomainId: nonEmpty.optional(),
    projectDomainName: nonEmpty.optional(),
    projectDomainId: nonEmpty.optional(),
    regionName: nonEmpty.optional(),
    interface: interfaceSchema.optional(),
  })
  .superRefine((value, ctx) => {
    requireOneOf(ctx, { username: value.username, userId: value.userId }, ['username', 'userId'], []);
    requireOneOf(ctx, { projectName: value.projectName, projectId: value.projectId }, ['projectName', 'projectId'], []);
  });

function checkPassword(
  settings: PasswordSettings,
  prefix: string,
  names: Record<string, string>,
  endpointOverride?: Partial<Record<ServiceType, string>>,
): PasswordCredentials {
  const parsed = passwordSchema.safeParse(settings);
  if (!parsed.success) {
    const nameOf = (issuePath: string): string => names[issuePath] ?? issuePath;
    // "username or userId is required" → "OS_USERNAME or OS_USER_ID is required"
    const issues = parsed.error.issues.map((issue) => ({
      ...issue,
      message: issue.message.replace(/\b(username|userId|projectName|projectId)\b/g, (key) => names[key] ?? key),
    }));
    throw new OpenStackConfigError(formatIssues(issues, prefix, nameOf));
  }
  const value = parsed.data;
  const credentials: PasswordCredentials = { type: 'password', ...value };
  if (endpointOverride && Object.keys(endpointOverride).length > 0) credentials.endpointOverride = endpointOverride;
  return credentials;
}

/** Credentials from the `OS_*` variables (as src/config.ts reads them). */
export function credentialsFromEnvSettings(variables: OpenStackEnvSettings['password']): PasswordCredentials {
  const settings: PasswordSettings = { ...variables, interface: variables.interface as EndpointInterface | undefined };
  return checkPassword(settings, '', {
    authUrl: 'OS_AUTH_URL',
    username: 'OS_USERNAME',
    userId: 'OS_USER_ID',
    password: 'OS_PASSWORD',
    projectName: 'OS_PROJECT_NAME',
    projectId: 'OS_PROJECT_ID',
    userDomainName: 'OS_USER_DOMAIN_NAME',
    userDomainId: 'OS_USER_DOMAIN_ID',
    projectDomainName: 'OS_PROJECT_DOMAIN_NAME',
    projectDomainId: 'OS_PROJECT_DOMAIN_ID',
    regionName: 'OS_REGION_NAME',
    interface: 'OS_INTERFACE',
  });
}

/**
 * The credentials to use: the cloud named by `options.cloud` or `OS_CLOUD` from clouds.yaml;
 * otherwise the `OS_*` variables when `OS_AUTH_URL` is set; otherwise an error saying what to set.
 */
export function loadCredentials(options: LoadCredentialsOptions = {}): OpenStackCredentials {
  const settings = settingsOf(options);
  const cloud = options.cloud ?? settings.cloud;
  if (cloud !== undefined) return credentialsFromCloudsYaml(cloud, { ...options, settings });
  if (settings.password.authUrl !== undefined) return credentialsFromEnvSettings(settings.password);
  throw new OpenStackConfigError('no OpenStack credentials: set OS_CLOUD (a cloud in clouds.yaml) or OS_AUTH_URL, OS_USERNAME, OS_PASSWORD and OS_PROJECT_NAME');
}
