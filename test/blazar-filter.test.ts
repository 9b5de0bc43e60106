/**
 * Our rendering of BlazarFilter's `host_passes` (test/support/blazar-filter.ts), rule by rule, on
 * hand-made aggregates: the rig test of leasekeeper's layout is only as good as this function.
 */
import { BLAZAR_FILTER_DEFAULTS, blazarHostPasses, blazarPools, INSTANCE_RESERVATION_SPEC, type FilterAggregate } from './support/blazar-filter';

const LESSEE = 'project-a';
const OTHER = 'project-b';
const RESERVATION = '9f0c2b1e-1111-4c6b-9a4e-0000000000aa';

const freepool: FilterAggregate = { name: 'freepool', availability_zone: null, metadata: { filter_tenant_id: 'leasekeeper-freepool' } };
const leaseAggregate = (metadata: Record<string, string>, zone = `blazar_${RESERVATION}`): FilterAggregate => ({ name: RESERVATION, availability_zone: zone, metadata });
const owned = leaseAggregate({ 'blazar:owner': LESSEE });
const plain: FilterAggregate = { name: 'compute-rack-1', availability_zone: 'nova', metadata: {} };
const hinted = (projectId: string, reservation: string | string[] = RESERVATION) => ({
  projectId,
  hints: { reservation: Array.isArray(reservation) ? reservation : [reservation] },
});

describe('BlazarFilter, as written', () => {
  describe('without the reservation hint', () => {
    it('passes a host in no blazar pool, in an ordinary zone or none', () => {
      expect(blazarHostPasses([], { projectId: OTHER })).toBe(true);
      expect(blazarHostPasses([plain], { projectId: OTHER })).toBe(true);
      expect(blazarHostPasses([plain], { projectId: OTHER, hints: {} })).toBe(true);
      expect(blazarHostPasses([plain], { projectId: OTHER, hints: { reservation: [] } })).toBe(true); // an empty list is no hint
    });

    it('fails a host in the freepool (by name, whatever its zone or metadata)', () => {
      expect(blazarHostPasses([freepool], { projectId: OTHER })).toBe(false);
      expect(blazarHostPasses([plain, { ...freepool, metadata: {} }], { projectId: OTHER })).toBe(false);
    });

    it('fails a host in a blazar zone, with the blazar_ prefix or the legacy blazar: one, even for the owner', () => {
      expect(blazarHostPasses([owned], { projectId: LESSEE })).toBe(false);
      expect(blazarHostPasses([leaseAggregate({}, `blazar:${RESERVATION}`)], { projectId: LESSEE })).toBe(false);
      expect(blazarHostPasses([leaseAggregate({}, 'lease-x')], { projectId: LESSEE })).toBe(true); // not a blazar zone
    });

    it('follows a changed zone prefix and pool name', () => {
      const options = { ...BLAZAR_FILTER_DEFAULTS, blazar_az_prefix: 'res-', aggregate_freepool_name: 'pool', preemptible_aggregate: 'pool' };
      expect(blazarHostPasses([owned], { projectId: LESSEE }, options)).toBe(true);
      expect(blazarHostPasses([freepool], { projectId: LESSEE }, options)).toBe(true);
      expect(blazarHostPasses([leaseAggregate({}, 'res-1')], { projectId: LESSEE }, options)).toBe(false);
      expect(blazarHostPasses([leaseAggregate({}, 'blazar:1')], { projectId: LESSEE }, options)).toBe(false); // the legacy prefix always counts
      expect(blazarHostPasses([{ ...freepool, name: 'pool' }], { projectId: LESSEE }, options)).toBe(false);
    });

    it('passes any host for an instance reservation flavor (other filters decide)', () => {
      const flavorExtraSpecs = { [INSTANCE_RESERVATION_SPEC]: RESERVATION };
      expect(blazarHostPasses([freepool], { projectId: OTHER, flavorExtraSpecs })).toBe(true);
      expect(blazarHostPasses([owned], { projectId: OTHER, flavorExtraSpecs: { [INSTANCE_RESERVATION_SPEC]: '' } })).toBe(true);
      expect(blazarHostPasses([owned], { projectId: OTHER, flavorExtraSpecs: { 'aggregate_instance_extra_specs:other': 'x' } })).toBe(false);
    });

    it('passes a preemptible request only where allowed, on a host whose only pool is the preemptible aggregate', () => {
      const preemptible = { projectId: OTHER, flavorExtraSpecs: { 'blazar:preemptible': 'True' } };
      const allowed = { ...BLAZAR_FILTER_DEFAULTS, allow_preemptibles: true };
      expect(blazarHostPasses([freepool], preemptible)).toBe(false); // not allowed by default
      expect(blazarHostPasses([freepool], preemptible, allowed)).toBe(true);
      expect(blazarHostPasses([freepool], { ...preemptible, flavorExtraSpecs: { 'blazar:preemptible': 'no' } }, allowed)).toBe(false);
      expect(blazarHostPasses([plain], preemptible, allowed)).toBe(false); // no pool at all: not for preemptibles
      expect(blazarHostPasses([freepool, owned], preemptible, allowed)).toBe(false);
      // Both in a blazar zone and named like the pool: counted twice, so not "only" the preemptible aggregate.
      expect(blazarPools([{ ...freepool, availability_zone: 'blazar_x' }])).toHaveLength(2);
      expect(blazarHostPasses([{ ...freepool, availability_zone: 'blazar_x' }], preemptible, allowed)).toBe(false);
    });
  });

  describe('with the reservation hint', () => {
    it('passes the owner (blazar:owner) or a project named as a metadata key, on the pool named in the hint', () => {
      expect(blazarHostPasses([owned], hinted(LESSEE))).toBe(true);
      expect(blazarHostPasses([plain, owned], hinted(LESSEE))).toBe(true);
      expect(blazarHostPasses([leaseAggregate({ 'blazar:owner': LESSEE, [OTHER]: 'blazar:tenant' })], hinted(OTHER))).toBe(true);
      expect(blazarHostPasses([leaseAggregate({ [OTHER]: '' })], hinted(OTHER))).toBe(false); // an empty value grants nothing
      expect(blazarHostPasses([leaseAggregate({ 'blazar:owner': LESSEE }, `blazar:${RESERVATION}`)], hinted(LESSEE))).toBe(true);
    });

    it('fails another project, and filter_tenant_id grants nothing', () => {
      expect(blazarHostPasses([owned], hinted(OTHER))).toBe(false);
      expect(blazarHostPasses([leaseAggregate({ filter_tenant_id: LESSEE })], hinted(LESSEE))).toBe(false);
    });

    it('fails a host not in the named pool, or whose aggregate so named is in no blazar zone', () => {
      expect(blazarHostPasses([owned], hinted(LESSEE, 'another-reservation'))).toBe(false);
      expect(blazarHostPasses([plain], hinted(LESSEE))).toBe(false);
      expect(blazarHostPasses([], hinted(LESSEE))).toBe(false);
      expect(blazarHostPasses([leaseAggregate({ 'blazar:owner': LESSEE }, 'nova')], hinted(LESSEE))).toBe(false);
      expect(blazarHostPasses([leaseAggregate({ 'blazar:owner': LESSEE }, '')], hinted(LESSEE))).toBe(false);
    });

    it("takes several pools in the hint, and the first of the host's pools named there decides", () => {
      expect(blazarHostPasses([owned], hinted(LESSEE, ['x', RESERVATION]))).toBe(true);
      const refusing = leaseAggregate({ 'blazar:owner': OTHER });
      expect(blazarHostPasses([refusing, owned], hinted(LESSEE))).toBe(false);
      expect(blazarHostPasses([owned, refusing], hinted(LESSEE))).toBe(true);
    });

    it('treats an empty hint as a request for a pool named "" (none), and ignores the instance reservation spec', () => {
      expect(blazarHostPasses([plain], hinted(LESSEE, ''))).toBe(false);
      expect(blazarHostPasses([plain], { ...hinted(LESSEE), flavorExtraSpecs: { [INSTANCE_RESERVATION_SPEC]: RESERVATION } })).toBe(false);
    });

    it('lets the freepool be asked for by name, for a project owning it', () => {
      expect(blazarHostPasses([freepool], hinted(LESSEE, 'freepool'))).toBe(false);
      expect(blazarHostPasses([{ ...freepool, metadata: { 'blazar:owner': LESSEE } }], hinted(LESSEE, 'freepool'))).toBe(true);
    });
  });
});
