-- Power management (issue 48, the planner): each host's last boots, so that its boot time is
-- learned (the 95th percentile of the last LK_POWER_BOOT_SAMPLES, src/domain/power-plan.ts). A boot
-- runs from the wake (host_power.woken_at) to the first look of the planner that finds its compute
-- service up in Nova; keyed by the wake, so a boot recorded twice is one. The store keeps the last
-- few per host (src/db/host-boots.ts).
CREATE TABLE host_boots (
  host_id   bigint NOT NULL REFERENCES hosts (id) ON DELETE CASCADE,
  woken_at  timestamptz NOT NULL,
  up_at     timestamptz NOT NULL CHECK (up_at >= woken_at),
  PRIMARY KEY (host_id, woken_at)
);

-- How long each host has been powered off in all, its periods that ended (the current one is
-- counted from powered_off_since): /metrics' host-hours powered off.
ALTER TABLE host_power ADD COLUMN off_ms_total bigint NOT NULL DEFAULT 0 CHECK (off_ms_total >= 0);
