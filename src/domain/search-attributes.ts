/**
 * The custom search attributes leasekeeper sets on lease workflows, so that operators can filter
 * leases in the Temporal Web UI (e.g. `LeaseStatus = "ACTIVE" AND ProjectId = "…"`).
 * One list serves the workflow (typed upserts) and the dev-server start-up (registration).
 */
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const LeaseStatusKey = defineSearchAttributeKey('LeaseStatus', SearchAttributeType.KEYWORD);
export const ProjectIdKey = defineSearchAttributeKey('ProjectId', SearchAttributeType.KEYWORD);
export const LeaseStartKey = defineSearchAttributeKey('LeaseStart', SearchAttributeType.DATETIME);
export const LeaseEndKey = defineSearchAttributeKey('LeaseEnd', SearchAttributeType.DATETIME);
export const ResourceTypesKey = defineSearchAttributeKey('ResourceTypes', SearchAttributeType.KEYWORD_LIST);

export const LEASE_SEARCH_ATTRIBUTES = [LeaseStatusKey, ProjectIdKey, LeaseStartKey, LeaseEndKey, ResourceTypesKey];

/** The type names `temporal server start-dev --search-attribute NAME=TYPE` and `temporal operator` expect. */
const CLI_TYPE_NAMES: Record<SearchAttributeType, string> = {
  TEXT: 'Text',
  KEYWORD: 'Keyword',
  INT: 'Int',
  DOUBLE: 'Double',
  BOOL: 'Bool',
  DATETIME: 'Datetime',
  KEYWORD_LIST: 'KeywordList',
};

export function searchAttributeCliSpecs(): string[] {
  return LEASE_SEARCH_ATTRIBUTES.map((key) => `${key.name}=${CLI_TYPE_NAMES[key.type]}`);
}
