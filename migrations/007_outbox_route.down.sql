DROP INDEX ferry_outbox_waiting;
DROP INDEX ferry_outbox_pending;
CREATE INDEX ferry_outbox_pending ON ferry_outbox (id) WHERE status = 'pending';
ALTER TABLE ferry_outbox DROP COLUMN route_wait_since;
DROP TABLE ferry_outbox_route;
