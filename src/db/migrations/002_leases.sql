-- One row per lease, written only by the lease's own workflow (through the recordLease activity),
-- so the API can list and show leases without asking Temporal. `version` grows with every
-- transition: a late or repeated write of an older version changes nothing.
CREATE TABLE leases (
  id          uuid PRIMARY KEY,
  name        text NOT NULL,
  project_id  text NOT NULL,
  user_id     text NOT NULL,
  status      text NOT NULL,
  start_at    timestamptz NOT NULL,
  end_at      timestamptz NOT NULL,
  version     bigint NOT NULL,
  -- What the lease's reservations hold (e.g. 'host:3'): leases sharing a key run back to back.
  resource_keys text[] NOT NULL DEFAULT '{}',
  document    jsonb NOT NULL,
  created_at  timestamptz NOT NULL,
  updated_at  timestamptz NOT NULL,
  deleted_at  timestamptz
);

-- Blazar refuses a second live lease with the same name in a project (clients look leases up by name).
CREATE UNIQUE INDEX leases_live_name ON leases (project_id, name) WHERE deleted_at IS NULL;
-- Listing: newest first, paged by (created_at, id), per project or across projects.
CREATE INDEX leases_live_by_project ON leases (project_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX leases_live_by_created ON leases (created_at DESC, id DESC) WHERE deleted_at IS NULL;
CREATE INDEX leases_live_by_status ON leases (status) WHERE deleted_at IS NULL;
CREATE INDEX leases_live_resource_keys ON leases USING gin (resource_keys) WHERE deleted_at IS NULL;
