-- A series's create (issue 42's review): `creating` from the claim of its row until the saga has
-- admitted its occurrences, `created` once it stands, `refused` when a refused create's row could
-- not be removed (its retry answers the refusal again). Only `created` series are read as series.
-- `attempt` names one try of a create: its occurrences' lease ids are derived from the series id,
-- it and their place, so that a retry finding `creating` can delete whatever that try admitted.
ALTER TABLE lease_series
  ADD COLUMN state text NOT NULL DEFAULT 'created' CHECK (state IN ('creating', 'created', 'refused')),
  ADD COLUMN attempt uuid;
