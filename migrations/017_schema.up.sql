-- Several deployments in one database (FERRY_SCHEMA): each deployment's
-- tables live in its schema, and what Postgres keeps per database rather
-- than per schema is named after the schema. The migrator sets
-- ferry.schema to FERRY_SCHEMA ('' for the default deployment, which keeps
-- every name it had) for the run, and the names are written into the
-- functions here, so no session has to know them:
--
-- ferry_liveness_namespace(): the first int of each worker's liveness lock
-- (namespace, ferry_worker.id); advisory locks are per database, and two
-- schemas' workers have the same ids. 911000003 by default.
--
-- ferry_outbox_channel(): the channel that wakes the relays (the insert
-- trigger's, ferry_outbox_notify, and a worker's when its routes change),
-- ferry_outbox by default, ferry_outbox.<schema> otherwise.
DO $do$
DECLARE
    s  text := coalesce(current_setting('ferry.schema', true), '');
    ns int  := CASE WHEN s = '' THEN 911000003 ELSE 911000003 # (hashtext('ferry-schema:' || s) | 1) END;
    ch text := CASE WHEN s = '' THEN 'ferry_outbox' ELSE 'ferry_outbox.' || s END;
BEGIN
    EXECUTE format('CREATE FUNCTION ferry_liveness_namespace() RETURNS int LANGUAGE sql IMMUTABLE AS %L',
        'SELECT ' || ns);
    EXECUTE format('CREATE FUNCTION ferry_outbox_channel() RETURNS text LANGUAGE sql IMMUTABLE AS %L',
        format('SELECT %L::text', ch));
    -- The trigger names its channel itself: a writer whose search_path
    -- does not lead to this schema still wakes this schema's relays.
    EXECUTE format('CREATE OR REPLACE FUNCTION ferry_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS %L',
        format('BEGIN PERFORM pg_notify(%L, %L); RETURN NULL; END;', ch, ''));
END
$do$;
