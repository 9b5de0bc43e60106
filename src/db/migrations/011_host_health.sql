-- What the host monitor last concluded about each enrolled host: `up`, or `failed` (its compute
-- service down, disabled or forced down, or its hypervisor gone from Nova). A failed host takes no
-- new bookings; the leases that hold it are healed by their resource types.
ALTER TABLE hosts ADD COLUMN state text NOT NULL DEFAULT 'up' CHECK (state IN ('up', 'failed'));
ALTER TABLE hosts ADD COLUMN state_since timestamptz;
ALTER TABLE hosts ADD COLUMN state_reason text CHECK (length(state_reason) <= 1024);
