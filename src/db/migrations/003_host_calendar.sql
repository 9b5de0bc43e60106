-- Reservable hosts (Blazar's os-hosts), their extra capabilities, and the calendar of which host
-- belongs to which reservation when. The exclusion constraint makes double booking impossible,
-- whatever the application does: two bookings of one host can never overlap in time.

CREATE TABLE hosts (
  id                   bigserial PRIMARY KEY,           -- shown as a numeric string, as Blazar's
  hypervisor_hostname  text NOT NULL UNIQUE,
  nova_hypervisor_id   text NOT NULL,
  hypervisor_type      text,
  hypervisor_version   text,
  service_name         text,
  vcpus                integer NOT NULL,
  memory_mb            integer NOT NULL,
  local_gb             integer NOT NULL,
  cpu_info             text,
  availability_zone    text,
  reservable           boolean NOT NULL DEFAULT true,
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE host_capabilities (
  host_id  bigint NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
  name     text NOT NULL CHECK (char_length(name) BETWEEN 1 AND 64),
  value    text NOT NULL,
  PRIMARY KEY (host_id, name)
);

-- Blazar's resource properties: a capability can be made private (hidden from non-admins).
CREATE TABLE capability_settings (
  name     text PRIMARY KEY,
  private  boolean NOT NULL DEFAULT false
);

CREATE TABLE host_allocations (
  id              bigserial PRIMARY KEY,
  host_id         bigint NOT NULL REFERENCES hosts (id),
  reservation_id  uuid NOT NULL,
  lease_id        uuid NOT NULL,
  project_id      text NOT NULL,
  during          tstzrange NOT NULL,  -- the lease window [start, end)
  blocks          tstzrange NOT NULL,  -- [start, end + cleaning time): what no other booking may touch
  booking_key     text NOT NULL,       -- which request (window and parameters) this booking answers
  CHECK (NOT isempty(during) AND lower(blocks) = lower(during) AND upper(blocks) >= upper(during)),
  CONSTRAINT host_allocations_no_double_booking EXCLUDE USING gist (host_id WITH =, blocks WITH &&)
);
CREATE INDEX host_allocations_by_reservation ON host_allocations (reservation_id);
CREATE INDEX host_allocations_by_lease ON host_allocations (lease_id);
