-- Owed preemptions (028) are claimed and told outside any transaction, one try at a time: a row
-- whose telling failed (or whose teller died) waits until `next_attempt_at`, later after each try,
-- and is given up after a bounded number of tries (its last error kept). Rows told whose end
-- passed days ago are purged a batch at a time.
ALTER TABLE lease_preemptions ADD COLUMN next_attempt_at timestamptz NOT NULL DEFAULT now();
DROP INDEX lease_preemptions_owed;
CREATE INDEX lease_preemptions_owed ON lease_preemptions (next_attempt_at) WHERE told_at IS NULL;
CREATE INDEX lease_preemptions_told ON lease_preemptions (end_at) WHERE told_at IS NOT NULL;
