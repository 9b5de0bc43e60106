-- A preemptible booking (issue 43): admitted only into hosts no booking holds, as any booking, and
-- cut by a regular lease's admission that needs its host (in the same transaction). The exclusion
-- constraints are unchanged: once a transaction commits, no booking overlaps another, preemptible
-- or not. Instance slots' shared rows are never preemptible (yet).
ALTER TABLE host_allocations ADD COLUMN preemptible boolean NOT NULL DEFAULT false;
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_preemptible_whole_bounded
  CHECK (NOT preemptible OR (NOT shared AND NOT upper_inf(blocks)));
-- A regular admission that must preempt reads the preemptible rows of its window's hosts.
CREATE INDEX host_allocations_preemptible ON host_allocations USING gist (host_id, blocks) WHERE preemptible;
