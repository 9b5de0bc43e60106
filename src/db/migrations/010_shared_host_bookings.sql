-- Instance slots (`virtual:instance`) share a host with other instance reservations but never with
-- a whole-host lease: their hosts are booked in host_allocations too, as `shared` rows. Two
-- exclusion constraints keep that true whatever the application does: bookings that are not shared
-- never overlap on a host (as before), and a shared booking never overlaps one that is not.
ALTER TABLE host_allocations ADD COLUMN shared boolean NOT NULL DEFAULT false;
ALTER TABLE host_allocations DROP CONSTRAINT host_allocations_no_double_booking;
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_no_double_booking
  EXCLUDE USING gist (host_id WITH =, blocks WITH &&) WHERE (NOT shared);
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_shared_only_with_shared
  EXCLUDE USING gist (host_id WITH =, blocks WITH &&, shared WITH <>);
