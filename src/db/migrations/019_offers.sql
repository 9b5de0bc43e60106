-- Offers handed out by POST /v1/offers and with refusals: what each stands for (the lease body it
-- would book, for its project) until it expires, so that a later hold or accept can find it by id.
CREATE TABLE offers (
  id uuid PRIMARY KEY,
  project_id text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('exact', 'later', 'shorter', 'fewer')),
  start_ms bigint NOT NULL,
  end_ms bigint NOT NULL CHECK (end_ms > start_ms),
  lease_body jsonb NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX offers_expires_at ON offers (expires_at);
