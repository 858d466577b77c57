DROP TRIGGER ferry_debounce_next_delete ON river_job;
DROP TRIGGER ferry_debounce_next_update ON river_job;
DROP FUNCTION ferry_debounce_next();
DROP FUNCTION ferry_debounce(bigint, jsonb, interval, interval);
DROP FUNCTION ferry_debounce_due(timestamptz, interval, interval);
