-- Preempted leases whose workflow is owed the news (issue 43): written by the regular admission
-- that cut the lease's bookings, in its transaction; the news is sent right after the commit, and
-- by the sweeps of every API and worker until the workflow took it (`told_at`). A second cut of
-- the same lease before it was told keeps the earliest end. No foreign key: a lease the workflow
-- admits is booked before its row is written; a lease gone by then has nothing to be told.
CREATE TABLE lease_preemptions (
  lease_id       uuid PRIMARY KEY,
  end_at         timestamptz NOT NULL,   -- the lease's new end (its bookings end there)
  needed_from    timestamptz NOT NULL,   -- when the regular lease needs the host (its block's start)
  created_at     timestamptz NOT NULL DEFAULT now(),
  told_at        timestamptz,
  attempts       integer NOT NULL DEFAULT 0,
  last_error     text CHECK (length(last_error) <= 1024)
);
CREATE INDEX lease_preemptions_owed ON lease_preemptions (created_at) WHERE told_at IS NULL;
