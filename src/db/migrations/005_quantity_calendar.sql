-- Quantities booked over time against Placement resource providers: a compute host's VCPU,
-- MEMORY_MB and DISK_GB for `virtual:server` reservations (and, later, a network device's
-- bandwidth). Unlike a whole host, a provider serves many bookings at once: at every instant the
-- amounts booked on it must stay within its capacity. Booking checks that while holding the
-- provider's row lock (SELECT … FOR UPDATE), so concurrent admissions on a provider go one by one.

CREATE TABLE capacity_providers (
  uuid          text PRIMARY KEY,     -- the Placement resource provider (for compute: the compute node)
  name          text NOT NULL,
  host          text NOT NULL,        -- the compute service host it belongs to
  kind          text NOT NULL,        -- which reservation type books it: 'compute', …
  capacity      jsonb NOT NULL,       -- resource class → (total − reserved) × allocation ratio
  traits        text[] NOT NULL DEFAULT '{}',
  usable        boolean NOT NULL DEFAULT true, -- false: gone from Placement, disabled, or taken by a host lease
  refreshed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX capacity_providers_by_kind ON capacity_providers (kind);

CREATE TABLE quantity_allocations (
  id              bigserial PRIMARY KEY,
  provider_uuid   text NOT NULL REFERENCES capacity_providers (uuid),
  reservation_id  uuid NOT NULL,
  lease_id        uuid NOT NULL,
  project_id      text NOT NULL,
  subject         text,                -- what is booked (a server id): never in two bookings at once
  amounts         jsonb NOT NULL,      -- resource class → amount
  during          tstzrange NOT NULL,  -- the lease window
  blocks          tstzrange NOT NULL,  -- from the start less the provisioning lead time
  booking_key     text NOT NULL,
  CONSTRAINT quantity_allocations_blocks_cover_window CHECK (NOT isempty(during) AND lower(blocks) <= lower(during) AND upper(blocks) >= upper(during)),
  CONSTRAINT quantity_allocations_one_booking_per_subject EXCLUDE USING gist (subject WITH =, blocks WITH &&)
);
CREATE INDEX quantity_allocations_by_provider ON quantity_allocations USING gist (provider_uuid, blocks);
CREATE INDEX quantity_allocations_by_reservation ON quantity_allocations (reservation_id);
CREATE INDEX quantity_allocations_by_lease ON quantity_allocations (lease_id);
