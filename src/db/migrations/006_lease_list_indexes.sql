-- Listing leases by window (`from` / `to`) and by name across projects without scanning every
-- live lease: with 100 000 pending leases, a one-day window took 29 ms (p50) through the
-- created_at index; the window's own index finds its leases directly.
CREATE INDEX leases_live_window ON leases USING gist (tstzrange(start_at, end_at, '[]')) WHERE deleted_at IS NULL;
CREATE INDEX leases_live_by_name ON leases (name) WHERE deleted_at IS NULL;
