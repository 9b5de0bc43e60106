/**
 * jest's own order (failed first, then the longest first), except that the rig's files that keep
 * Nova, Keystone and Placement busiest run last: `npm test` runs
 * the rig's files beside the other test runs, which load the rig's services (rig-shared) and the CPU
 * in its first minutes; there these files took up to twice as long as alone (a fresh-clone run of
 * 8242f88: server-leases 98 s against 56 s), while those that mostly wait on time-outs lost nothing.
 */
const Sequencer = require('@jest/test-sequencer').default;

const RIG_LATE_TESTS = ['server-leases', 'instance-leases', 'bandwidth-leases', 'slot-isolation'];

class RigLateSequencer extends Sequencer {
  sort(tests) {
    const sorted = super.sort(tests);
    const late = (test) => RIG_LATE_TESTS.some((name) => test.path.endsWith(`/test/openstack/${name}.test.ts`));
    return [...sorted.filter((test) => !late(test)), ...sorted.filter(late)];
  }
}
module.exports = RigLateSequencer;
