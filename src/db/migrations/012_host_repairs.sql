-- The last drift the host monitor found on a host (it was not in the aggregate the calendar says),
-- and what it did about it: {"at", "found", "action", "repaired"}.
ALTER TABLE hosts ADD COLUMN last_repair jsonb CHECK (octet_length(last_repair::text) <= 4096);
