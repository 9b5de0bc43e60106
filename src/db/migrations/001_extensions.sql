-- btree_gist lets later exclusion constraints mix equality (host id) with range overlap (lease window):
--   EXCLUDE USING gist (host_id WITH =, during WITH &&)
CREATE EXTENSION IF NOT EXISTS btree_gist;
