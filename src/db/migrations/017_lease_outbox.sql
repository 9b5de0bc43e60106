-- Leases the API admitted itself (one transaction: the bookings, the lease's row and this row),
-- whose workflow is owed a start. `input` is the workflow's input as it is to be started. The row
-- stays once the workflow is started (`started_at`): a retried create with the same
-- Idempotency-Key is told apart from another request by `request_hash`. Rows go with their lease.
CREATE TABLE lease_outbox (
  lease_id     uuid PRIMARY KEY REFERENCES leases (id) ON DELETE CASCADE,
  request_hash text NOT NULL CHECK (length(request_hash) = 64),
  input        jsonb NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  started_at   timestamptz,
  attempts     integer NOT NULL DEFAULT 0,
  last_error   text CHECK (length(last_error) <= 1024)
);
-- The owed starts, oldest first: the sweep reads only these.
CREATE INDEX lease_outbox_owed ON lease_outbox (created_at) WHERE started_at IS NULL;
