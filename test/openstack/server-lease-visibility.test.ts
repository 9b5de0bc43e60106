/**
 * A `virtual:server` reservation that creates its server (flavor_id, image_id, networks) may use
 * only what the lessee's project may use: leasekeeper creates the server with the service user's
 * admin role, which would see every project's images, flavors and networks. Checked at admission
 * (400 at create and update, never a start failing on it) and again at the start (a share withdrawn
 * meanwhile). Another project's private things are "not found or not visible", like missing ones.
 */
import { projectScopedClients, type Flavor, type Image, type Network } from '../../src/openstack';
import { virtualServerPlugin } from '../../src/resources/virtual-server';
import { apiClient, deleteAllLeases, eventually, inSeconds, useTestStack } from '../../dev-stack/stack';
import { Cleanup, FLAVOR, IMAGE, projectIdOf, rigClients, rigCredentials, uniqueName } from './support';

describe('server leases use only the images, flavors and networks the lessee may use', () => {
  const admin = rigClients('leasekeeper-admin');
  const projectA = rigClients('leasekeeper-project-a');
  const projectB = rigClients('leasekeeper-project-b');
  const cleanup = new Cleanup();
  let asA: ReturnType<typeof apiClient>;
  let projectAId: string;
  let projectBId: string;
  let tiny: Flavor;
  let publicImage: Image;

  const newImage = async (owner: typeof admin, visibility: Image['visibility']) => {
    const image = await owner.glance.createImage({ name: uniqueName('img'), visibility, disk_format: 'raw', container_format: 'bare' });
    cleanup.add(`image ${image.id}`, () => admin.glance.deleteImage(image.id));
    return image;
  };
  const newFlavor = async (isPublic: boolean) => {
    const flavor = await admin.nova.createFlavor({ name: uniqueName('flv'), vcpus: 1, ram: 512, disk: 1, is_public: isPublic });
    cleanup.add(`flavor ${flavor.id}`, () => admin.nova.deleteFlavor(flavor.id));
    return flavor;
  };
  const newNetwork = async (projectId: string, shared = false): Promise<Network> => {
    const network = await admin.neutron.createNetwork({ name: uniqueName('net'), project_id: projectId, shared });
    cleanup.add(`network ${network.id}`, () => admin.neutron.deleteNetwork(network.id));
    return network;
  };
  /** A lease of project A creating a server from these; starting in an hour unless said otherwise. */
  const serverLease = (create: { flavor_id?: string; image_id?: string; networks?: unknown }, start = inSeconds(3600)) =>
    asA('POST', '/v1/leases', {
      name: uniqueName('vm'),
      start_date: start,
      end_date: inSeconds(7200),
      reservations: [{ resource_type: 'virtual:server', flavor_id: tiny.id, image_id: publicImage.id, networks: 'none', ...create }],
    });
  const hidden = (field: string, what: string, id: string) => `${field}: ${what} ${id} not found or not visible to project ${projectAId}`;

  // Servers are created in the lessee's project with the rig admin's inherited admin role: the role the checks must see past.
  const stack = useTestStack({ withPool: (pool) => [virtualServerPlugin({ pool, cloud: () => admin, projectCloud: projectScopedClients({ credentials: rigCredentials('leasekeeper-admin') }), settings: { capacityRefreshMs: 0 } })] });

  beforeAll(async () => {
    [projectAId, projectBId] = await Promise.all([projectIdOf('leasekeeper-project-a'), projectIdOf('leasekeeper-project-b')]);
    asA = apiClient(stack().url, { 'x-project-id': projectAId, 'x-user-id': 'user-a' });
    tiny = (await admin.nova.listFlavors()).find((f) => f.name === FLAVOR)!;
    [publicImage] = await admin.glance.listImages({ name: IMAGE });
  });

  afterEach(async () => {
    await deleteAllLeases(asA);
  }, 180_000);

  afterAll(async () => {
    await cleanup.run();
  });

  it("refuses another project's private image, and a shared image it is not a member of, as if they did not exist", async () => {
    const privateOfB = await newImage(projectB, 'private');
    const sharedElsewhere = await newImage(projectB, 'shared'); // shared, but not with project A
    const missing = '00000000-0000-4000-8000-000000000000';
    for (const image of [privateOfB.id, sharedElsewhere.id, missing]) {
      const refused = await serverLease({ image_id: image });
      expect(refused.status).toBe(400);
      expect(refused.body.error_message).toBe(hidden('image_id', 'image', image));
    }
  }, 120_000);

  it('admits public, community, own and shared-with-it images (a member may use a share in any member status, as Glance lets it)', async () => {
    const own = await newImage(projectA, 'private');
    const community = await newImage(admin, 'community');
    const shared = await newImage(projectB, 'shared');
    await projectB.glance.addImageMember(shared.id, projectAId); // pending: not listed for A, but usable
    for (const image of [publicImage.id, own.id, community.id, shared.id]) {
      const admitted = await serverLease({ image_id: image });
      expect([image, admitted.status, admitted.body.error_message]).toEqual([image, 201, undefined]);
      expect(admitted.body.lease.reservations[0].image_id).toBe(image);
    }
  }, 120_000);

  it('refuses a private flavor without access for the project, admits it with access', async () => {
    const privateFlavor = await newFlavor(false);
    const refused = await serverLease({ flavor_id: privateFlavor.id });
    expect(refused.status).toBe(400);
    expect(refused.body.error_message).toBe(hidden('flavor_id', 'flavor', privateFlavor.id));
    const missing = await serverLease({ flavor_id: 'no-such-flavor' });
    expect(missing.status).toBe(400);
    expect(missing.body.error_message).toBe(hidden('flavor_id', 'flavor', 'no-such-flavor'));

    await admin.nova.addFlavorAccess(privateFlavor.id, projectAId);
    const admitted = await serverLease({ flavor_id: privateFlavor.id });
    expect(admitted.status).toBe(201);
    expect(admitted.body.lease.reservations[0].flavor).toBe(privateFlavor.name);
  }, 120_000);

  it("refuses another project's private network; admits its own, a shared one, and one shared with it by RBAC", async () => {
    const ofB = await newNetwork(projectBId);
    const refused = await serverLease({ networks: [ofB.id] });
    expect(refused.status).toBe(400);
    expect(refused.body.error_message).toBe(hidden('networks', 'network', ofB.id));

    const own = await newNetwork(projectAId);
    const shared = await newNetwork(projectBId, true);
    const rbacShared = await newNetwork(projectBId);
    const policy = await admin.neutron.createRbacPolicy({ object_type: 'network', object_id: rbacShared.id, action: 'access_as_shared', target_tenant: projectAId });
    cleanup.add(`rbac policy ${policy.id}`, () => admin.neutron.deleteRbacPolicy(policy.id));
    // One private network among visible ones is enough to refuse.
    const mixed = await serverLease({ networks: [own.id, ofB.id] });
    expect(mixed.status).toBe(400);
    expect(mixed.body.error_message).toBe(hidden('networks', 'network', ofB.id));
    const admitted = await serverLease({ networks: [own.id, shared.id, rbacShared.id] });
    expect(admitted.status).toBe(201);
    expect(admitted.body.lease.reservations[0].networks).toEqual([own.id, shared.id, rbacShared.id]);
  }, 120_000);

  it('checks an update as a creation: the lease keeps its image when the new one is not visible', async () => {
    const created = await serverLease({});
    expect(created.status).toBe(201);
    const lease = created.body.lease;
    const privateOfB = await newImage(projectB, 'private');
    const changed = await asA('PUT', `/v1/leases/${lease.id}`, { reservations: [{ id: lease.reservations[0].id, image_id: privateOfB.id }] });
    expect(changed.status).toBe(400);
    expect(changed.body.error_message).toBe(hidden('image_id', 'image', privateOfB.id));
    expect((await asA('GET', `/v1/leases/${lease.id}`)).body.lease.reservations[0].image_id).toBe(publicImage.id);
  }, 120_000);

  it('fails the start with the reason when the image was unshared after the admission, and creates no server', async () => {
    const shared = await newImage(projectB, 'shared');
    await projectB.glance.addImageMember(shared.id, projectAId);
    const created = await serverLease({ image_id: shared.id }, inSeconds(20));
    expect(created.status).toBe(201);
    const { id } = created.body.lease;
    await projectB.glance.removeImageMember(shared.id, projectAId);

    const failed = await eventually(async () => {
      const lease = (await asA('GET', `/v1/leases/${id}`)).body.lease;
      return lease.status === 'ERROR' ? lease : undefined;
    }, 90_000, 500);
    expect(failed.status_reason).toContain(hidden('image_id', 'image', shared.id));
    const name = `lease-${created.body.lease.reservations[0].id}`;
    expect(await admin.nova.listServers({ all_tenants: true, name: `^${name}$` })).toEqual([]);
  }, 150_000);
});
