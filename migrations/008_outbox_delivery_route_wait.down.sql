DROP INDEX IF EXISTS ferry_outbox_delivery_pending_route;
ALTER TABLE ferry_outbox_delivery DROP COLUMN IF EXISTS route_wait_since;
