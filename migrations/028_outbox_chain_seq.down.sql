DROP INDEX ferry_outbox_ordering_pending;
DROP INDEX ferry_outbox_chain;
ALTER TABLE ferry_outbox DROP COLUMN chain_seq;
