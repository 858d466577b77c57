DROP TABLE ferry_telegram_malformed;
DROP TABLE ferry_telegram_offset;
