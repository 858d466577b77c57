DROP INDEX ferry_outbox_delivery_waiting;
DROP INDEX ferry_outbox_ordering;
ALTER TABLE ferry_outbox DROP COLUMN ordering_key;
