#!/bin/sh
# Run once by the postgres image when it creates the primary's database (docker-compose.yml).
set -e
# The replica's base backup and streaming connect over the compose network.
echo "host replication footprint all scram-sha-256" >> "$PGDATA/pg_hba.conf"
# Connections through PgBouncer cannot pass the settings' `-c jit=off`: the database keeps it.
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -c "ALTER DATABASE footprint SET jit = off"
