/** Credentials from clouds.yaml and OS_* variables: conventions and error messages. */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { loadCredentials, OpenStackConfigError } from '../../src/openstack';
import { CLOUDS_FILE, rigCredentials } from './support';

let dir: string;

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lk-clouds-'));
});

afterAll(() => {
  fs.rmSync(dir, { recursive: true, force: true });
});

function write(name: string, text: string): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
}

function configError(run: () => unknown): OpenStackConfigError {
  try {
    run();
  } catch (error) {
    expect(error).toBeInstanceOf(OpenStackConfigError);
    return error as OpenStackConfigError;
  }
  throw new Error('expected an OpenStackConfigError');
}

const baseEnv = {
  OS_AUTH_URL: 'http://keystone.example:5000/v3',
  OS_USERNAME: 'alice',
  OS_PASSWORD: 's3cret',
  OS_PROJECT_NAME: 'demo',
  OS_USER_DOMAIN_NAME: 'Default',
  OS_PROJECT_DOMAIN_NAME: 'Default',
  OS_REGION_NAME: 'RegionTwo',
  OS_INTERFACE: 'internalURL',
};

function without(name: keyof typeof baseEnv): Record<string, string> {
  const env: Record<string, string> = { ...baseEnv };
  delete env[name];
  return env;
}

describe('OS_* variables', () => {
  test('are read when OS_CLOUD is unset', () => {
    expect(loadCredentials({ env: baseEnv })).toEqual({
      type: 'password',
      authUrl: 'http://keystone.example:5000/v3',
      username: 'alice',
      password: 's3cret',
      projectName: 'demo',
      userDomainName: 'Default',
      projectDomainName: 'Default',
      regionName: 'RegionTwo',
      interface: 'internal',
    });
  });

  test('a missing setting is named', () => {
    expect(configError(() => loadCredentials({ env: without('OS_PASSWORD') })).message).toBe('OS_PASSWORD is required');
    expect(configError(() => loadCredentials({ env: without('OS_PROJECT_NAME') })).message).toBe('OS_PROJECT_NAME or OS_PROJECT_ID is required');
    expect(configError(() => loadCredentials({ env: { ...baseEnv, OS_AUTH_URL: 'keystone' } })).message).toBe('OS_AUTH_URL must be an http(s) URL');
    expect(configError(() => loadCredentials({ env: { ...baseEnv, OS_INTERFACE: 'private' } })).message).toBe(
      'OS_INTERFACE must be public, internal or admin',
    );
  });

  test('nothing at all says what to set', () => {
    expect(configError(() => loadCredentials({ env: {} })).message).toMatch(/set OS_CLOUD .* or OS_AUTH_URL/);
  });
});

describe('clouds.yaml', () => {
  test('OS_CLIENT_CONFIG_FILE + OS_CLOUD select the cloud; the rig file parses', () => {
    const credentials = loadCredentials({ env: { OS_CLIENT_CONFIG_FILE: CLOUDS_FILE, OS_CLOUD: 'leasekeeper-project-a' } });
    expect(credentials).toMatchObject({ type: 'password', username: 'user-a', projectName: 'project-a', regionName: 'RegionOne', interface: 'public' });
    expect(rigCredentials('leasekeeper-admin')).toMatchObject({ username: 'admin', projectName: 'admin' });
  });

  test('./clouds.yaml is found from the working directory, and secure.yaml is merged in', () => {
    const cwd = fs.mkdtempSync(path.join(dir, 'cwd-'));
    fs.writeFileSync(
      path.join(cwd, 'clouds.yaml'),
      'clouds:\n  c1:\n    auth:\n      auth_url: http://k:5000\n      username: u\n      project_id: p1\n    compute_endpoint_override: http://nova:8774/v2.1\n',
    );
    fs.writeFileSync(path.join(cwd, 'secure.yaml'), 'clouds:\n  c1:\n    auth:\n      password: from-secure\n');
    const credentials = loadCredentials({ env: { OS_CLOUD: 'c1', HOME: cwd }, cwd });
    expect(credentials).toEqual({
      type: 'password',
      authUrl: 'http://k:5000',
      username: 'u',
      password: 'from-secure',
      projectId: 'p1',
      endpointOverride: { compute: 'http://nova:8774/v2.1' },
    });
  });

  test('missing settings and unknown clouds are named', () => {
    const file = write('clouds.yaml', 'clouds:\n  c1:\n    auth:\n      auth_url: http://k:5000/v3\n      username: u\n      project_name: p\n');
    expect(configError(() => loadCredentials({ cloud: 'c1', env: { OS_CLIENT_CONFIG_FILE: file } })).message).toBe(
      `${file} cloud 'c1': auth.password is required`,
    );
    expect(configError(() => loadCredentials({ cloud: 'nope', env: { OS_CLIENT_CONFIG_FILE: file } })).message).toBe(
      `cloud 'nope' (OS_CLOUD) is not in ${file}; it has c1`,
    );
    expect(configError(() => loadCredentials({ cloud: 'c1', cloudsFiles: [path.join(dir, 'absent.yaml')], env: {} })).message).toMatch(
      /no clouds.yaml was found/,
    );
    const bad = write('bad.yaml', 'clouds: [\n');
    expect(configError(() => loadCredentials({ cloud: 'c1', env: { OS_CLIENT_CONFIG_FILE: bad } })).message).toMatch(/is not valid YAML/);
  });

  test('auth_type none gives static endpoints', () => {
    const file = write(
      'noauth.yaml',
      'clouds:\n  bare:\n    auth_type: none\n    auth:\n      token: admin\n    placement_endpoint_override: http://127.0.0.1:8778\n',
    );
    expect(loadCredentials({ cloud: 'bare', env: { OS_CLIENT_CONFIG_FILE: file } })).toEqual({
      type: 'static',
      endpoints: { placement: 'http://127.0.0.1:8778' },
      token: 'admin',
    });
  });
});
