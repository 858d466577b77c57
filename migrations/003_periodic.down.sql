DROP TABLE ferry_periodic_tick;
DROP TABLE ferry_schedule;
