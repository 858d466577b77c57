DROP TABLE IF EXISTS ferry_broadcast_message;
