/** What a flavor takes in Placement, as flavor:instance books it (pure). */
import { flavorFootprint, UnsupportedFlavorError } from '../src/resources/flavor-instance/footprint';

const flavor = (fields: Partial<Parameters<typeof flavorFootprint>[0]> = {}) => ({ vcpus: 4, ram: 2048, disk: 20, swap: '' as const, 'OS-FLV-EXT-DATA:ephemeral': 0, extra_specs: {}, ...fields });

describe('flavor footprint', () => {
  it('counts vCPUs, memory, and root + ephemeral + swap disk as Nova does', () => {
    expect(flavorFootprint(flavor({ 'OS-FLV-EXT-DATA:ephemeral': 5, swap: 1536 }))).toEqual({ amounts: { VCPU: 4, MEMORY_MB: 2048, DISK_GB: 27 }, requiredTraits: [], forbiddenTraits: [] });
  });

  it('books dedicated CPUs as PCPU, applies resources: overrides (0 drops a class), and reads traits', () => {
    const footprint = flavorFootprint(
      flavor({ extra_specs: { 'hw:cpu_policy': 'dedicated', 'resources:DISK_GB': '0', 'resources:CUSTOM_FPGA': '1', 'trait:HW_CPU_X86_AVX2': 'required', 'trait:CUSTOM_SLOW': 'forbidden', 'hw:watchdog_action': 'reset' } }),
    );
    expect(footprint).toEqual({ amounts: { PCPU: 4, MEMORY_MB: 2048, CUSTOM_FPGA: 1 }, requiredTraits: ['HW_CPU_X86_AVX2'], forbiddenTraits: ['CUSTOM_SLOW'] });
  });

  it('refuses what it cannot book faithfully: request groups, bad amounts, bad trait values', () => {
    expect(() => flavorFootprint(flavor({ extra_specs: { 'resources1:VGPU': '1' } }))).toThrow(UnsupportedFlavorError);
    expect(() => flavorFootprint(flavor({ extra_specs: { 'resources:VCPU': 'lots' } }))).toThrow('expected a whole number');
    expect(() => flavorFootprint(flavor({ extra_specs: { 'trait:CUSTOM_X': 'preferred' } }))).toThrow('Invalid value for trait CUSTOM_X');
  });
});
