-- A series created with an Idempotency-Key (issue 42): its id comes from the key, and the hash of
-- the create's body tells a retry of the same request (answered with the series) from another
-- request reusing the key (refused). NULL for a series created without a key.
ALTER TABLE lease_series ADD COLUMN request_hash text;
