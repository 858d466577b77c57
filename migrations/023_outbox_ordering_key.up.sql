-- Ordered delivery per key: messages of one topic with the same
-- ordering_key start their delivery to each route in message order (id),
-- one at a time; a later one waits until the one before it is delivered.
-- NULL: no order, delivered in parallel. The relay inserts the delivery
-- job of a key's first undelivered message only; the others' deliveries
-- wait with job_id NULL, and the delivery that completes inserts its
-- successor's job (package outbox, "Ordered delivery").
ALTER TABLE ferry_outbox
    ADD COLUMN ordering_key text,
    ADD CONSTRAINT ferry_outbox_ordering_key_length CHECK (
        ordering_key IS NULL OR char_length(ordering_key) BETWEEN 1 AND 256);

-- A key's messages in order: the relay's and the completion's look-ups of
-- a message's predecessors and successor.
CREATE INDEX ferry_outbox_ordering ON ferry_outbox (topic, ordering_key, id) WHERE ordering_key IS NOT NULL;

-- Deliveries waiting behind their key's predecessor: the relay's release
-- pass and the stats read them.
CREATE INDEX ferry_outbox_delivery_waiting ON ferry_outbox_delivery (route, message_id) WHERE status = 'pending' AND job_id IS NULL;
