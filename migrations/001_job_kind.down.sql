DROP TABLE ferry_job_kind;
