-- A pending delivery whose route no live worker declares (a route removed
-- from every worker by a deploy) waits from route_wait_since for the same
-- grace period as a message with no route for its topic, then is stuck
-- with 'no live worker declares the route' and its River job cancelled.
-- The leader's route sweeper sets, clears and acts on it.
ALTER TABLE ferry_outbox_delivery ADD COLUMN route_wait_since timestamptz;

CREATE INDEX ferry_outbox_delivery_pending_route ON ferry_outbox_delivery (route) WHERE status = 'pending';
