DROP TABLE ferry_lock;
