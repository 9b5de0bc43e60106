-- Floating IP addresses enrolled for reservation (Blazar's floatingips), and the calendar of which
-- address belongs to which reservation when. As for hosts, the exclusion constraint makes double
-- booking impossible: two bookings of one address never overlap in time.

CREATE TABLE floating_ips (
  id                   uuid PRIMARY KEY,
  floating_network_id  text NOT NULL,
  subnet_id            text NOT NULL,
  floating_ip_address  inet NOT NULL,
  reservable           boolean NOT NULL DEFAULT true,
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz,
  CONSTRAINT floating_ips_one_per_address UNIQUE (floating_network_id, floating_ip_address)
);

CREATE TABLE floating_ip_allocations (
  id              bigserial PRIMARY KEY,
  floating_ip_id  uuid NOT NULL REFERENCES floating_ips (id),
  reservation_id  uuid NOT NULL,
  lease_id        uuid NOT NULL,
  project_id      text NOT NULL,
  during          tstzrange NOT NULL,  -- the lease window [start, end)
  blocks          tstzrange NOT NULL,  -- from the start less the provisioning lead time
  booking_key     text NOT NULL,       -- which request (window and parameters) this booking answers
  CONSTRAINT floating_ip_allocations_blocks_cover_window CHECK (NOT isempty(during) AND lower(blocks) <= lower(during) AND upper(blocks) >= upper(during)),
  CONSTRAINT floating_ip_allocations_no_double_booking EXCLUDE USING gist (floating_ip_id WITH =, blocks WITH &&)
);
CREATE INDEX floating_ip_allocations_by_reservation ON floating_ip_allocations (reservation_id);
CREATE INDEX floating_ip_allocations_by_lease ON floating_ip_allocations (lease_id);
