-- The leases an admin's answer is waited for (GET /v1/leases?awaiting_approval=true, the calendar
-- page's "Waiting for approval"): leases PENDING_APPROVAL and active leases whose change waits
-- (`pendingChange` in the document). Few among many: found without scanning every live lease.
CREATE INDEX leases_awaiting_approval ON leases (created_at, id)
  WHERE deleted_at IS NULL AND (status = 'PENDING_APPROVAL' OR document ? 'pendingChange');
