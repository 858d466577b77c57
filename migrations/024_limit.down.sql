DROP TABLE ferry_limit_rate;
DROP TABLE ferry_limit_wait;
DROP TABLE ferry_limit_slot;
DROP TABLE ferry_limit;
