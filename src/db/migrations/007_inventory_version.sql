-- A counter bumped by every change to the host inventory (hosts and their capabilities), whoever
-- makes it: availability queries keep the host list in memory and read it again only when the
-- counter moved (reading 1 000 hosts with their capabilities cost more than the query itself).
CREATE TABLE inventory_version (
  singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
  version   bigint NOT NULL
);
INSERT INTO inventory_version (version) VALUES (0);

CREATE FUNCTION bump_inventory_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  UPDATE inventory_version SET version = version + 1;
  RETURN NULL;
END;
$$;

CREATE TRIGGER hosts_bump_inventory_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON hosts
  FOR EACH STATEMENT EXECUTE FUNCTION bump_inventory_version();
CREATE TRIGGER host_capabilities_bump_inventory_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON host_capabilities
  FOR EACH STATEMENT EXECUTE FUNCTION bump_inventory_version();
