-- Offer holds (POST /v1/offers/{id}/hold): an offer's reservations booked in the calendars for a
-- few minutes, under a lease_id that is the hold's own id, so that an accept records the lease with
-- that id and it owns the rows as they are. This table is the only mark of what is held: the
-- allocation rows look like a lease's. One hold per offer, ever.
CREATE TABLE offer_holds (
  id          uuid PRIMARY KEY,
  offer_id    uuid NOT NULL UNIQUE,
  project_id  text NOT NULL,
  user_id     text NOT NULL,
  state       text NOT NULL CHECK (state IN ('held', 'accepted', 'ended')),
  end_reason  text CHECK (end_reason IN ('expired', 'released', 'refused')),
  lease       jsonb NOT NULL,
  expires_at  timestamptz NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now(),
  ended_at    timestamptz
);
CREATE INDEX offer_holds_live_by_project ON offer_holds (project_id) WHERE state = 'held';
CREATE INDEX offer_holds_live_by_expiry ON offer_holds (expires_at) WHERE state = 'held';
