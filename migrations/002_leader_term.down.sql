DROP TABLE ferry_leader_term;
