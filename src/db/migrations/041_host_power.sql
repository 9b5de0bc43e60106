-- Power management (issue 48): how each reservable host's power is reached (its driver and the
-- driver's settings, set by an admin through os-hosts' `power`), and what is known of its power.
-- The password is read only by the driver that uses it: os-hosts shows whether one is set, never
-- the password itself. A host without a row has the `none` driver (nothing powers it on or off).
CREATE TABLE host_power (
  host_id            bigint PRIMARY KEY REFERENCES hosts (id) ON DELETE CASCADE,
  driver             text NOT NULL CHECK (driver IN ('ipmi', 'ironic', 'command', 'none')),
  address            text CHECK (length(address) BETWEEN 1 AND 255),
  port               integer CHECK (port BETWEEN 1 AND 65535),
  username           text CHECK (length(username) BETWEEN 1 AND 64),
  password           text CHECK (length(password) BETWEEN 1 AND 64),
  node               text CHECK (length(node) BETWEEN 1 AND 255),
  -- false: the planner never powers the host off (waking it, by hand or for a booking, still works).
  manage             boolean NOT NULL DEFAULT true,
  -- The host's boot time until its own boots are known; null: the deployment's LK_POWER_BOOT_SECONDS.
  boot_seconds       integer CHECK (boot_seconds BETWEEN 1 AND 86400),
  -- The last power state read or brought about, and when; powered_off_since: since when it has been off.
  power_state        text NOT NULL DEFAULT 'unknown' CHECK (power_state IN ('on', 'off', 'unknown')),
  power_state_at     timestamptz,
  powered_off_since  timestamptz CHECK ((powered_off_since IS NULL) = (power_state <> 'off')),
  -- When it was last woken (its state brought to on from another): until its boot time and
  -- LK_POWER_RESUME_TIMEOUT_SECONDS have passed, its compute service down is no failure.
  woken_at           timestamptz,
  updated_at         timestamptz NOT NULL DEFAULT now()
);
