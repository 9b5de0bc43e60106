-- Recurring leases (issue 42): a series is the rule and the lease it repeats; each occurrence is a
-- lease of its own (its own workflow), tied to the series by leases.series_id. `refused` keeps the
-- occurrences a partial create could not admit (their window and reason), which the calendar draws as gaps.
CREATE TABLE lease_series (
  id uuid PRIMARY KEY,
  project_id text NOT NULL,
  name text NOT NULL,
  recurrence text NOT NULL,
  template jsonb NOT NULL,
  refused jsonb NOT NULL DEFAULT '[]',
  created_at timestamptz NOT NULL DEFAULT now(),
  deleted_at timestamptz
);
CREATE INDEX lease_series_project ON lease_series (project_id) WHERE deleted_at IS NULL;
ALTER TABLE leases ADD COLUMN series_id uuid;
CREATE INDEX leases_series ON leases (series_id, start_at) WHERE series_id IS NOT NULL AND deleted_at IS NULL;
