-- Extension offers (GET /v1/leases/{id}/extension-offers, a refused extension) get their own kind,
-- `extension`, instead of borrowing `shorter` (which means a new lease for less time than asked).
ALTER TABLE offers DROP CONSTRAINT offers_kind_check;
ALTER TABLE offers ADD CONSTRAINT offers_kind_check CHECK (kind IN ('exact', 'later', 'shorter', 'fewer', 'extension'));
