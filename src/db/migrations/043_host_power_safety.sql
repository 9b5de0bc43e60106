-- Power management's safety (issue 48, the review's fixes): what a power change in progress, a
-- wake and a failing driver leave in the database, so that admission, the host monitor, the API
-- and the planner (a workflow whose state is not the only record) all read the same facts.
ALTER TABLE host_power
  -- Set (in the transaction that locks the host's row against new bookings and finds it free) when
  -- the planner or an admin begins a power-off; cleared once the host is recorded off, or on again
  -- when the power-off failed. Admission counts such a host as asleep; the monitor expects it down.
  ADD COLUMN powering_off_at timestamptz,
  -- The last wake asked of the host's driver (the planner's or an admin's), and by when its compute
  -- service must be up: the wake's time + its learned boot time + LK_POWER_RESUME_TIMEOUT_SECONDS.
  -- Both cleared once Nova reports the service up (the boot then recorded) or the host is powered
  -- off again. Until the deadline the service down is expected; after it, it is a failure, whatever
  -- the BMC says.
  ADD COLUMN wake_requested_at timestamptz,
  ADD COLUMN boot_deadline_at timestamptz,
  -- The last failure of the host's driver (any power call), since when, how many in a row, and when
  -- the planner may try again: credentials refused or settings that cannot work back off, doubling
  -- up to an hour. Cleared by a call that succeeds and by a change of the host's power settings.
  ADD COLUMN power_error text CHECK (length(power_error) <= 1024),
  ADD COLUMN power_error_at timestamptz,
  ADD COLUMN power_error_count integer NOT NULL DEFAULT 0 CHECK (power_error_count >= 0),
  ADD COLUMN power_retry_at timestamptz,
  ADD CONSTRAINT host_power_wake_has_deadline CHECK ((wake_requested_at IS NULL) = (boot_deadline_at IS NULL));

-- A host woken by the code before this migration (it kept only woken_at) may still be booting: its
-- wake is kept as one awaited, with the deadline that code gave it (its boot_seconds, else the
-- default 600 s, plus the resume time-out's default 600 s), so that neither the host monitor nor
-- the planner takes its compute service still down for a failure. Older wakes are over.
UPDATE host_power
   SET wake_requested_at = woken_at,
       boot_deadline_at = woken_at + make_interval(secs => COALESCE(boot_seconds, 600) + 600)
 WHERE power_state = 'on' AND woken_at IS NOT NULL
   AND woken_at + make_interval(secs => COALESCE(boot_seconds, 600) + 600) > now();
