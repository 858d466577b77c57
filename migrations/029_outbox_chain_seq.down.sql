DROP TRIGGER ferry_outbox_chain_place ON ferry_outbox;
DROP FUNCTION ferry_outbox_chain_place();
DROP INDEX ferry_outbox_ordering_pending;
DROP INDEX ferry_outbox_chain;
ALTER TABLE ferry_outbox DROP COLUMN chain_seq;
