-- Preemptible instance slots (issue 43): a `virtual:instance` reservation may be preemptible. Its
-- slot rows are flagged, as are the shared host rows it writes, so that a regular admission reads
-- them as free and cuts their lease (slots and host rows alike, one lease one end). The exclusion
-- constraints and the peak checks under the provider locks are unchanged: once a transaction
-- commits, no booking overlaps a whole-host one, and no provider is over capacity, preemptible or not.
ALTER TABLE quantity_allocations ADD COLUMN preemptible boolean NOT NULL DEFAULT false;
ALTER TABLE host_allocations DROP CONSTRAINT host_allocations_preemptible_whole_bounded;
ALTER TABLE host_allocations ADD CONSTRAINT host_allocations_preemptible_bounded CHECK (NOT preemptible OR NOT upper_inf(blocks));
-- A regular slot admission that must preempt reads the preemptible slots of its window's providers.
CREATE INDEX quantity_allocations_preemptible ON quantity_allocations USING gist (provider_uuid, blocks) WHERE preemptible;
