-- A booking may block its host from before its window: hosts are made ready a provisioning lead
-- time before the start. A booking under the `release` end policy blocks its host for good (no
-- upper bound): the host leaves the reservable pool at the lease's end.
ALTER TABLE host_allocations DROP CONSTRAINT host_allocations_check;
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_blocks_cover_window
  CHECK (NOT isempty(during) AND lower(blocks) <= lower(during) AND (upper_inf(blocks) OR upper(blocks) >= upper(during)));

-- A host handed to the shared cloud by a lease's `release` policy: no longer reservable, flagged
-- for the operator (os-hosts shows both); remove and enrol it again to make it reservable.
ALTER TABLE hosts ADD COLUMN released_at timestamptz;
ALTER TABLE hosts ADD COLUMN released_by_lease uuid;
