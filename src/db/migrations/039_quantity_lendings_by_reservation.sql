-- A lender's row asks until when its lendings on that provider run (SLOT_LENDER_ROW_LENT_UNTIL, issue 43),
-- returned ones too, whenever its reservation's rows end: one index probe per row instead of a scan.
CREATE INDEX quantity_lendings_by_reservation ON quantity_lendings (reservation_id, provider_uuid);
