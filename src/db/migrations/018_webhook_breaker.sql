-- A project webhook's circuit breaker: how many deliveries in a row it left unanswered (time-outs,
-- connection failures), and, once that reached LK_WEBHOOK_BREAKER_FAILURES, until when its
-- deliveries are held back (then one probe goes; while it runs, the others stay held).
ALTER TABLE project_webhooks
  ADD COLUMN failures_in_row integer NOT NULL DEFAULT 0 CHECK (failures_in_row >= 0),
  ADD COLUMN held_until timestamptz;
