#!/bin/sh
# Creates Temporal's two PostgreSQL databases if they are missing and brings both schemas up to the
# version of this temporal-sql-tool (the schema files are built into it). Safe to run again; after
# a server upgrade it is the upgrade. One script for every topology: dev-stack/temporal-server.ts
# (tests, `LK_TEMPORAL=server npm start`) and docker-compose.yml run it.
# Environment: SQL_HOST, SQL_PORT, SQL_USER, SQL_PASSWORD (read by the tool itself); TEMPORAL_SQL_TOOL
# (default: temporal-sql-tool on PATH); TEMPORAL_DB, TEMPORAL_VISIBILITY_DB (default: temporal, temporal_visibility).
set -eu
tool="${TEMPORAL_SQL_TOOL:-temporal-sql-tool}"
for spec in "${TEMPORAL_DB:-temporal}:temporal" "${TEMPORAL_VISIBILITY_DB:-temporal_visibility}:visibility"; do
  db="${spec%:*}"
  schema="postgresql/v12/${spec##*:}"
  "$tool" --plugin postgres12 --db "$db" create-database
  "$tool" --plugin postgres12 --db "$db" setup-schema -v 0.0
  "$tool" --plugin postgres12 --db "$db" update-schema --schema-name "$schema"
  echo "setup-schema: database $db at the schema of $schema"
done
