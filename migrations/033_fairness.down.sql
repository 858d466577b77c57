DROP TRIGGER ferry_limit_gate_activate ON ferry_limit_gate;
DROP FUNCTION ferry_limit_gate_activate();
DROP TABLE ferry_limit_gate_started;
DROP INDEX ferry_limit_gate_activated;
DROP INDEX ferry_limit_gate_drained;
ALTER TABLE ferry_limit_gate DROP COLUMN activated, DROP COLUMN drained_at;
DROP SEQUENCE ferry_limit_gate_activation;
-- Jobs parked behind a fairness only go back to 'available' (they park
-- again behind the limits left, if any, as the sweep frees them).
UPDATE river_job j SET state = 'available', metadata = j.metadata - 'ferry_gate'
WHERE j.state = 'pending' AND j.metadata ? 'ferry_gate'
  AND EXISTS (SELECT 1 FROM ferry_limit_gate_part gp JOIN ferry_limit l ON l.name = gp.limit_name
              WHERE gp.gate_id = (j.metadata->>'ferry_gate')::bigint AND l.fair);
DELETE FROM ferry_limit WHERE fair;
ALTER TABLE ferry_limit DROP CONSTRAINT ferry_limit_fair_whole;
ALTER TABLE ferry_limit DROP CONSTRAINT ferry_limit_some;
ALTER TABLE ferry_limit ADD CONSTRAINT ferry_limit_some CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL);
ALTER TABLE ferry_limit DROP COLUMN fair, DROP COLUMN weights, DROP COLUMN default_weight;
