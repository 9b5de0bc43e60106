/**
 * The usage policy as the worker and the API build it from the settings, at start: a bad policy
 * file or external-filter setting stops the process with one line naming it (ConfigError).
 */
import { ConfigError, DEFAULT_PREEMPTIBLE_CHARGE_FACTOR, externalFilterSettingsFromEnv, type Config } from '../config';
import type { Pool } from '../db/pool';
import { UsagePolicyEnforcer } from './enforcement';
import { ExternalServiceFilter } from './external-filter';
import { environmentRules, loadPolicyFile } from './rules';

export type { UsagePolicyEnforcer };

export function usagePolicy(pool: Pool, config: Pick<Config, 'leaseLimits' | 'policy'> & Partial<Pick<Config, 'offerHolds' | 'approvalMinuteMs' | 'preemption'>>, onFailedOpen?: (reason: string) => void): UsagePolicyEnforcer {
  let file;
  try {
    file = loadPolicyFile(config.policy.LK_POLICY_FILE);
  } catch (err) {
    throw new ConfigError(`invalid configuration: ${(err as Error).message}`);
  }
  const external = externalFilterSettingsFromEnv(config.policy);
  return new UsagePolicyEnforcer({ pool, base: environmentRules({ ...config.leaseLimits, maxOfferHolds: config.offerHolds?.maxAtOnce }), file, external: external && new ExternalServiceFilter(external), onFailedOpen, approvalMinuteMs: config.approvalMinuteMs,
    preemptibleChargeFactor: config.preemption?.chargeFactor ?? DEFAULT_PREEMPTIBLE_CHARGE_FACTOR,
  });
}
