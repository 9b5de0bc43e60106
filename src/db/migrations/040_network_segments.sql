-- Network segments (VLAN or VXLAN tags) enrolled for reservation (issue 45, Chameleon's
-- network_segments), and their calendar: which reservation holds which segment when. As for hosts
-- and floating IPs, the exclusion constraint makes double booking impossible: two bookings of one
-- segment never overlap in time.

CREATE TABLE network_segments (
  id                uuid PRIMARY KEY,
  network_type      text NOT NULL CHECK (network_type IN ('vlan', 'vxlan')),
  physical_network  text,               -- null for vxlan
  segment_id        text NOT NULL,      -- the tag, as text (as Chameleon keeps it)
  capabilities      jsonb NOT NULL DEFAULT '{}',
  created_at        timestamptz NOT NULL DEFAULT now(),
  updated_at        timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT network_segments_physnet_for_vlan CHECK (network_type <> 'vlan' OR physical_network IS NOT NULL)
);
-- One enrolment per tag of a physical network (a vxlan tag has none: '' stands for it).
CREATE UNIQUE INDEX network_segments_one_per_tag ON network_segments (network_type, COALESCE(physical_network, ''), segment_id);

CREATE TABLE network_segment_allocations (
  id              bigserial PRIMARY KEY,
  network_segment_id uuid NOT NULL REFERENCES network_segments (id),
  reservation_id  uuid NOT NULL,
  lease_id        uuid NOT NULL,
  project_id      text NOT NULL,
  during          tstzrange NOT NULL,  -- the lease window [start, end)
  blocks          tstzrange NOT NULL,  -- from the start less the provisioning lead time
  booking_key     text NOT NULL,       -- which request (window and parameters) this booking answers
  CONSTRAINT network_segment_allocations_blocks_cover_window CHECK (NOT isempty(during) AND lower(blocks) <= lower(during) AND upper(blocks) >= upper(during)),
  CONSTRAINT network_segment_allocations_no_double_booking EXCLUDE USING gist (network_segment_id WITH =, blocks WITH &&)
);
CREATE INDEX network_segment_allocations_by_reservation ON network_segment_allocations (reservation_id);
CREATE INDEX network_segment_allocations_by_lease ON network_segment_allocations (lease_id);
