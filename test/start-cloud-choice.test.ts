/** Which cloud `npm start` serves, from the environment (dev-stack/openstack-rig.ts). */
import { chooseCloud } from '../dev-stack/openstack-rig';

describe('npm start: the cloud it serves', () => {
  it('runs the loopback rig when the environment names no cloud, and only as root', () => {
    expect(chooseCloud({}, true)).toEqual({ kind: 'rig' });
    expect(chooseCloud({}, false)).toEqual({ kind: 'none', why: expect.stringContaining('runs as root') });
    expect(chooseCloud({ LK_OPENSTACK: 'rig', OS_CLOUD: 'prod' }, true)).toEqual({ kind: 'rig' });
  });

  it('uses the cloud OS_CLOUD or OS_AUTH_URL names, and none with LK_OPENSTACK=none', () => {
    expect(chooseCloud({ OS_CLOUD: 'prod' }, true)).toEqual({ kind: 'external', what: 'OS_CLOUD=prod' });
    expect(chooseCloud({ OS_AUTH_URL: 'https://keystone.example/v3' }, false)).toEqual({ kind: 'external', what: 'OS_AUTH_URL=https://keystone.example/v3' });
    expect(chooseCloud({ LK_OPENSTACK: 'none', OS_CLOUD: 'prod' }, true)).toEqual({ kind: 'none', why: 'LK_OPENSTACK=none' });
  });

  it('refuses a choice it does not know, naming the ones it does', () => {
    expect(() => chooseCloud({ LK_OPENSTACK: 'devstack' }, true)).toThrow('LK_OPENSTACK="devstack": expected "none" (no cloud) or "rig" (the loopback OpenStack)');
  });
});
