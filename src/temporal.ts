import { Client, Connection } from '@temporalio/client';
import { encodeSearchAttributeIndexedValueType } from '@temporalio/common/lib/search-attributes';
import type { Config } from './config';
import { LEASE_SEARCH_ATTRIBUTES } from './domain/search-attributes';

export function connectTemporal(config: Pick<Config, 'temporal'>): { connection: Connection; client: Client } {
  // Lazy: the API starts (and reports 503 on /healthz) even while Temporal is unreachable.
  const connection = Connection.lazy({ address: config.temporal.address });
  const client = new Client({ connection, namespace: config.temporal.namespace });
  return { connection, client };
}

/**
 * Registers the lease search attributes on a server that lacks them (docker-compose, a shared
 * cluster); the dev server gets them at start. Returns the names it added.
 */
export async function ensureSearchAttributes(connection: Connection, namespace: string): Promise<string[]> {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace });
  const missing = LEASE_SEARCH_ATTRIBUTES.filter((key) => !(key.name in (customAttributes ?? {})));
  if (missing.length === 0) return [];
  await connection.operatorService.addSearchAttributes({
    namespace,
    searchAttributes: Object.fromEntries(missing.map((key) => [key.name, encodeSearchAttributeIndexedValueType(key.type)!])),
  });
  return missing.map((key) => key.name);
}
