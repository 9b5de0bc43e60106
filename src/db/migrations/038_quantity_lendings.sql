-- Lending instance slots (issue 43), as 037 lends hosts: an active regular slot lease lends k of its
-- slots on a host until a time; preemptible slot leases may book inside that interval and amount
-- only. The lender's slot rows are unchanged (regular asks still count them whole). One lending row
-- per provider names one of the lender's rows there (they share one window) by a composite key that
-- copies its window (ON UPDATE CASCADE) and a CHECK: no statement can shrink that row under what it
-- lends (23514). Borrowers' slots are quantity_allocations rows with `lent_by`, held inside their
-- lending's `during` the same way. Sums cannot be an exclusion constraint: the borrowers' peak within
-- a lending stays within its `amounts` because every borrower insert or move holds the lending row
-- FOR UPDATE and checks that peak before it commits (as provider peaks are checked under the
-- providers' locks); a reclaim takes the same lock.
ALTER TABLE quantity_allocations ADD CONSTRAINT quantity_allocations_id_provider_during UNIQUE (id, provider_uuid, during);
CREATE TABLE quantity_lendings (
  id              bigserial PRIMARY KEY,
  lending_id      uuid NOT NULL,          -- one lend request (the workflow's uuid4)
  allocation_id   bigint NOT NULL,        -- one of the lender's slot rows on the provider (its rows there share one window)
  provider_uuid   text NOT NULL,
  lender_during   tstzrange NOT NULL,     -- copy of that row's window (cascaded)
  lease_id        uuid NOT NULL,
  reservation_id  uuid NOT NULL,
  project_id      text NOT NULL CHECK (char_length(project_id) <= 255),
  slots           integer NOT NULL CHECK (slots BETWEEN 1 AND 1000),
  amounts         jsonb NOT NULL,         -- slots × the lender's slot size: what borrowers may hold at once
  during          tstzrange NOT NULL,     -- [lent at, until), shortened by a reclaim to when its borrowers are out
  reclaimed_at    timestamptz,
  returned_at     timestamptz,            -- the slots are back in the lender's hands (or the lender ended)
  borrowed_ms     bigint CHECK (borrowed_ms >= 0), -- slot-ms borrowers booked in it, set when returned (accounting)
  UNIQUE (lending_id, provider_uuid),
  UNIQUE (id, provider_uuid, during),
  FOREIGN KEY (allocation_id, provider_uuid, lender_during) REFERENCES quantity_allocations (id, provider_uuid, during) ON UPDATE CASCADE ON DELETE CASCADE,
  CHECK (NOT isempty(during) AND NOT upper_inf(during) AND lender_during @> during)
);
CREATE INDEX quantity_lendings_open ON quantity_lendings (reservation_id) WHERE returned_at IS NULL;
CREATE INDEX quantity_lendings_by_provider ON quantity_lendings USING gist (provider_uuid, during) WHERE returned_at IS NULL;
-- The cascade's lookup on every change of a lender row's window.
CREATE INDEX quantity_lendings_by_allocation ON quantity_lendings (allocation_id);
ALTER TABLE quantity_allocations ADD COLUMN lent_by bigint, ADD COLUMN lent_during tstzrange;
-- A lending deleted (its lender's row gone) frees its borrowers' rows, past ones.
ALTER TABLE quantity_allocations ADD CONSTRAINT quantity_allocations_borrowed_within
  FOREIGN KEY (lent_by, provider_uuid, lent_during) REFERENCES quantity_lendings (id, provider_uuid, during)
  ON UPDATE CASCADE ON DELETE SET NULL (lent_by, lent_during);
ALTER TABLE quantity_allocations ADD CONSTRAINT quantity_allocations_borrowing_shape CHECK (
  (lent_by IS NULL) = (lent_during IS NULL) AND (lent_by IS NULL OR (preemptible AND lent_during @> blocks)));
CREATE INDEX quantity_allocations_borrowed ON quantity_allocations (lent_by) WHERE lent_by IS NOT NULL;
