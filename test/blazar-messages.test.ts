/** Blazar's own error sentences where its clients and API tests (gabbi) read them; ours may follow. */
import { ApplicationFailure } from '@temporalio/common';
import { checkCapabilities } from '../src/resources/physical-host/inventory';

describe("Blazar's error messages", () => {
  it('refuses a capability name over 64 characters as Blazar does ("Extra capability key too long")', () => {
    const name = 'extra_capability_key_should_be_shorter_than_64_ABCDEFGHIJKLMNOPQRSTUVWXYZ';
    expect(() => checkCapabilities({ [name]: 'foo' })).toThrow(ApplicationFailure);
    expect(() => checkCapabilities({ [name]: 'foo' })).toThrow(/^Extra capability key too long\. Capability names must be 1 to 64 characters: /);
    expect(checkCapabilities({ ['k'.repeat(64)]: 'foo' })).toEqual({ ['k'.repeat(64)]: 'foo' });
  });
});
