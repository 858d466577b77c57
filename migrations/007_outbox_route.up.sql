-- ferry_outbox_route: the outbox routes each worker process declares, so
-- that every relay fans a message out to the routes of every live worker,
-- not only its own. A worker writes its rows at start, keyed by its River
-- client id (ferry_worker.client_id); a row counts only while that worker
-- is alive, which is judged by its liveness lock (911000003, ferry_worker.id)
-- as internal/liveness judges it, never by a timestamp. Rows of workers
-- that stopped or were declared dead are deleted by the next worker that
-- publishes.
CREATE TABLE ferry_outbox_route (
    client_id    text        NOT NULL,
    topic        text        NOT NULL,
    route        text        NOT NULL,
    kind         text        NOT NULL,
    queue        text        NOT NULL,
    published_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (client_id, route),
    CONSTRAINT ferry_outbox_route_kind CHECK (kind IN ('webhook', 'handler'))
);

CREATE INDEX ferry_outbox_route_topic ON ferry_outbox_route (topic);

-- A message whose topic no live worker routes waits (status pending,
-- last_error 'waiting for a route') from route_wait_since for a grace
-- period, then is stuck with 'no route for topic'.
ALTER TABLE ferry_outbox ADD COLUMN route_wait_since timestamptz;

-- The relay claims new pending messages through this index; waiting ones
-- are left out of it, so that a backlog of them never slows the claim.
DROP INDEX ferry_outbox_pending;
CREATE INDEX ferry_outbox_pending ON ferry_outbox (id) WHERE status = 'pending' AND route_wait_since IS NULL;
CREATE INDEX ferry_outbox_waiting ON ferry_outbox (topic, id) WHERE status = 'pending' AND route_wait_since IS NOT NULL;
