-- The usage policy's per-project rules set by admins over the API (`PUT /v1/projects/{id}/policy`),
-- over the deployment's (LK_POLICY_FILE). `rules` holds the written form (durations as "48h").
CREATE TABLE project_policies (
  project_id  text PRIMARY KEY CHECK (length(project_id) BETWEEN 1 AND 255),
  rules       jsonb NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now(),
  updated_by  text NOT NULL CHECK (length(updated_by) <= 255)
);

-- The policy check and the usage report read a project's leases, deleted ones included (they are
-- charged for what they used), by the span they cover.
CREATE INDEX leases_by_project_span ON leases (project_id, end_at, start_at);
