-- Maintenance windows: an operator's booking of one host over [start, end). New leases avoid it
-- (the host calendar reads it as blocked time); pending leases it overlaps are healed elsewhere
-- (flagged when they cannot move). Windows of one host never overlap. A window's workflow
-- (`maintenance-<id>`) disables the compute service at its start when asked
-- (`compute_disabled_at` then says since when, so that the host monitor does not count the
-- disabled service as a failure), and enables it again at its end. A window ended early keeps its
-- row, cut at the moment it ended; one that never began is deleted.
CREATE TABLE host_maintenance (
  id                   uuid PRIMARY KEY,
  host_id              bigint NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
  during               tstzrange NOT NULL CHECK (NOT isempty(during) AND NOT lower_inf(during) AND NOT upper_inf(during)),
  reason               text NOT NULL CHECK (length(reason) <= 255),
  disable_compute      boolean NOT NULL DEFAULT false,
  compute_disabled_at  timestamptz,
  created_at           timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT host_maintenance_no_overlap EXCLUDE USING gist (host_id WITH =, during WITH &&)
);
CREATE INDEX host_maintenance_by_start ON host_maintenance (lower(during), id);
