-- What the host monitor last concluded about the compute hosts that are not enrolled for
-- whole-host leases but carry quantity bookings (a virtual:server's room, a network:bandwidth
-- provider): `up` or `failed`, keyed by the compute service host, as hosts.state is for enrolled
-- hosts. A provider on a failed host takes no new booking; the reservations booked there are
-- healed by their resource types.
CREATE TABLE compute_host_health (
  host          text PRIMARY KEY CHECK (length(host) <= 255),
  state         text NOT NULL CHECK (state IN ('up', 'failed')),
  state_since   timestamptz NOT NULL,
  state_reason  text CHECK (length(state_reason) <= 1024)
);
