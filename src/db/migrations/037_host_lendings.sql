-- Lending (issue 43): an active regular lease lends idle hosts until a time; preemptible leases may
-- book inside that interval only. The lender's booking is unchanged (regular leases still see the
-- host as taken). Borrowers' bookings are host_allocations rows with `lent_by`: exempt from the
-- no-double-booking constraint, kept apart from one another by their own, and held inside their
-- lending (which is held inside the lender's window) by composite keys that copy the enclosing
-- range (ON UPDATE CASCADE) and CHECKs: no statement can shrink a lending or a lender's booking
-- under what it holds (23514), nor grow a borrower out of it. The lender's cleaning gap is not lent:
-- a lending lies in the lender's window (`during`), a borrower's blocked range in its lending.
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_id_host_during UNIQUE (id, host_id, during);
CREATE TABLE host_lendings (
  id              bigserial PRIMARY KEY,
  lending_id      uuid NOT NULL,          -- one lend request (the workflow's uuid4)
  allocation_id   bigint NOT NULL,        -- the lender's booking of the host
  host_id         bigint NOT NULL,
  lender_during   tstzrange NOT NULL,     -- copy of that booking's window (cascaded)
  lease_id        uuid NOT NULL,
  reservation_id  uuid NOT NULL,
  project_id      text NOT NULL CHECK (char_length(project_id) <= 255),
  during          tstzrange NOT NULL,     -- [lent at, until), shortened by a reclaim to when the host returns
  reclaimed_at    timestamptz,            -- a reclaim took it back (`during` then ends when its borrowers are out)
  returned_at     timestamptz,            -- the host is back in the lender's hands (or the lender ended)
  borrowed_ms     bigint CHECK (borrowed_ms >= 0), -- host-ms borrowers booked in it, set when returned (accounting)
  UNIQUE (lending_id, host_id),
  UNIQUE (id, host_id, during),
  FOREIGN KEY (allocation_id, host_id, lender_during) REFERENCES host_allocations (id, host_id, during) ON UPDATE CASCADE ON DELETE CASCADE,
  CHECK (NOT isempty(during) AND NOT upper_inf(during) AND lender_during @> during),
  CONSTRAINT host_lendings_apart EXCLUDE USING gist (host_id WITH =, during WITH &&)
);
CREATE INDEX host_lendings_open ON host_lendings (reservation_id) WHERE returned_at IS NULL;
-- The cascade's lookup on every change of a lender's window, and the lent view's join.
CREATE INDEX host_lendings_by_allocation ON host_lendings (allocation_id);
ALTER TABLE host_allocations ADD COLUMN lent_by bigint, ADD COLUMN lent_during tstzrange;
-- A lending deleted (its lender's row gone: the host left the pool) frees its borrowers' rows, past ones.
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_borrowed_within
  FOREIGN KEY (lent_by, host_id, lent_during) REFERENCES host_lendings (id, host_id, during)
  ON UPDATE CASCADE ON DELETE SET NULL (lent_by, lent_during);
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_borrowing_shape CHECK (
  (lent_by IS NULL) = (lent_during IS NULL) AND (lent_by IS NULL OR (preemptible AND NOT shared AND lent_during @> blocks)));
ALTER TABLE host_allocations DROP CONSTRAINT host_allocations_no_double_booking;
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_no_double_booking
  EXCLUDE USING gist (host_id WITH =, blocks WITH &&) WHERE (NOT shared AND lent_by IS NULL);
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_borrowers_apart
  EXCLUDE USING gist (host_id WITH =, blocks WITH &&) WHERE (lent_by IS NOT NULL);
CREATE INDEX host_allocations_borrowed ON host_allocations (lent_by) WHERE lent_by IS NOT NULL;
-- A reclaim owes its borrowers the same news as a preemption, told with another reason.
ALTER TABLE lease_preemptions ADD COLUMN kind text NOT NULL DEFAULT 'preempted' CHECK (kind IN ('preempted', 'reclaimed'));
