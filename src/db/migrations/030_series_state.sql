-- A series's create (issue 42's review): `creating` from the claim of its row until the saga has
-- admitted its occurrences, `created` once it stands, `refused` when a refused create's row could
-- not be removed (its retry answers the refusal again). Only `created` series are read as series.
-- `attempt` names one try of a create: its occurrences' lease ids are derived from the series id,
-- it and their place, so that a retry finding `creating` can delete whatever that try admitted.
ALTER TABLE lease_series
  ADD COLUMN state text NOT NULL DEFAULT 'created' CHECK (state IN ('creating', 'created', 'refused')),
  ADD COLUMN attempt uuid;
-- Which create an Idempotency-Key was used for (issue 42's review): a lease create and a series
-- create derive different ids from one key, so each claims the key here first, and the other's use
-- of it is a 409. `id` hashes (project, user, key), as the lease and series ids derived from it.
CREATE TABLE idempotency_keys (
  id text PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('lease', 'series')),
  created_at timestamptz NOT NULL DEFAULT now()
);
