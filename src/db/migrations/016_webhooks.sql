-- Projects' own webhooks (`PUT /v1/projects/{id}/webhooks`): where a project's lease notices are
-- posted, besides the deployment's (LK_WEBHOOK_URLS). `secret` is the HMAC key of the signature
-- (kept as given: signing needs it); `events` null means every lease event. The counters and the
-- last error tell the project how its deliveries go.
CREATE TABLE project_webhooks (
  id              uuid PRIMARY KEY,
  project_id      text NOT NULL CHECK (length(project_id) BETWEEN 1 AND 255),
  -- The order of the project's list, as PUT gave it.
  position        smallint NOT NULL CHECK (position BETWEEN 0 AND 99),
  url             text NOT NULL CHECK (length(url) BETWEEN 1 AND 2048),
  secret          text NOT NULL CHECK (length(secret) BETWEEN 16 AND 256),
  events          text[] CHECK (events IS NULL OR cardinality(events) BETWEEN 1 AND 64),
  created_at      timestamptz NOT NULL DEFAULT now(),
  created_by      text NOT NULL CHECK (length(created_by) <= 255),
  delivered_count bigint NOT NULL DEFAULT 0,
  dropped_count   bigint NOT NULL DEFAULT 0,
  last_error      text CHECK (length(last_error) <= 1024),
  last_error_at   timestamptz,
  -- A URL once per project (a PUT that repeats it keeps the entry); also the index by project.
  UNIQUE (project_id, url)
);
