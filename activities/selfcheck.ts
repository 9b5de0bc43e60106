import { schemaVersion } from '../src/db/migrate';
import type { ActivityDeps } from './deps';

/** Proves a worker can reach the database: used by the deep health check. */
export function selfCheckActivities({ pool }: ActivityDeps) {
  return {
    async checkDatabase(): Promise<{ schemaVersion: number }> {
      return { schemaVersion: await schemaVersion(pool) };
    },
  };
}
