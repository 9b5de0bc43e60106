-- GET /v1/os-hosts/allocations streams every booking ordered by host, then start, in batches, each
-- resuming after the last one read: without an index in that order, each batch sorted the whole
-- table again (100 000 bookings: 5.5 s for the list, against 1.2 s read at once).
CREATE INDEX host_allocations_by_host_start ON host_allocations (host_id, lower(during), id);
