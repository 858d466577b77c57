DROP TABLE ferry_seal_run;
