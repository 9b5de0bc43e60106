/**
 * Parameters are stored as the API parsed them, and hooks get them without a parse: a reservation
 * recorded before a parameter had its default (a lease admitted by an earlier release, still
 * running) reaches its hooks without it. Such records get what the default would have given.
 */
import { endPolicyOf, physicalHostParams, type PhysicalHostParams } from '../src/resources/physical-host/params';
import { beforeEndAction } from '../src/resources/shared/params';

describe('stored parameters from before a default existed', () => {
  it('a host reservation without on_end (before 2026-11-21) ends by the deployment\'s policy', () => {
    const recorded: Partial<PhysicalHostParams> = { min: 1, max: 1, hypervisor_properties: '', resource_properties: '' };
    expect(endPolicyOf(recorded)).toBe('delete');
    expect(endPolicyOf(recorded, 'recycle')).toBe('recycle');
    // The same as a reservation parsed today, which gets on_end "default".
    expect(endPolicyOf(physicalHostParams.parse(recorded), 'recycle')).toBe('recycle');
    expect(endPolicyOf({ on_end: 'release' }, 'recycle')).toBe('release');
  });

  it('a reservation without before_end (before 2026-11-24) gets the deployment\'s before-end action', () => {
    expect(beforeEndAction(undefined, 'snapshot')).toBe('snapshot');
    expect(beforeEndAction(undefined, undefined)).toBe('');
    expect(beforeEndAction('', 'snapshot')).toBe('');
    expect(beforeEndAction('notify', 'snapshot')).toBe('notify');
  });
});
