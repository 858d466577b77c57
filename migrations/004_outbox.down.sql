DROP TABLE ferry_outbox_received;
DROP TABLE ferry_outbox_delivery;
DROP TRIGGER ferry_outbox_notify ON ferry_outbox;
DROP FUNCTION ferry_outbox_notify();
DROP TABLE ferry_outbox;
