-- Weighted fairness across the keys of a queue (package internal/limit,
-- doc.go "Fairness"; config file section fairness:). A queue's fairness is
-- registered as a row of ferry_limit with fair set and no concurrency or
-- rate: named fair:<queue>, keyed by the field whose values share the
-- queue, it parks every job of the queue behind a gate per key, and the
-- workers' claim serves the gates in proportion to their keys' weights.
-- weights and default_weight are the fairness's, as the workers' config
-- gives them (`enqueue queues` and the console show them).
ALTER TABLE ferry_limit
    ADD COLUMN fair boolean NOT NULL DEFAULT false,
    ADD COLUMN weights jsonb,
    ADD COLUMN default_weight double precision;
ALTER TABLE ferry_limit DROP CONSTRAINT ferry_limit_some;
ALTER TABLE ferry_limit ADD CONSTRAINT ferry_limit_some
    CHECK (concurrency IS NOT NULL OR rate_count IS NOT NULL OR fair);
ALTER TABLE ferry_limit ADD CONSTRAINT ferry_limit_fair_whole
    CHECK (NOT fair OR (queue IS NOT NULL AND key_field IS NOT NULL AND concurrency IS NULL AND rate_count IS NULL));

-- activated orders the gates' activations (a new gate's, or an inactive
-- one's that a job parks in): a worker serving a fair queue keeps its
-- gates in memory and reads only those activated since it last looked.
-- drained_at is when a claim last marked the gate inactive: the leader's
-- sweep looks every second at the gates drained in the last seconds for a
-- job parked while the claim looked (every minute at all of them).
CREATE SEQUENCE ferry_limit_gate_activation;
ALTER TABLE ferry_limit_gate
    ADD COLUMN activated bigint NOT NULL DEFAULT nextval('ferry_limit_gate_activation'),
    ADD COLUMN drained_at timestamptz;
CREATE INDEX ferry_limit_gate_activated ON ferry_limit_gate (queue, activated) WHERE active;
CREATE INDEX ferry_limit_gate_drained ON ferry_limit_gate (drained_at) WHERE NOT active;

-- The jobs claimed from each gate, as each worker adds its own every few
-- seconds: `enqueue queues` and the console show them per key. A table of
-- its own, so that the counts' writes never wait on, or hold up, the
-- gates' rows that parks and claims update.
CREATE TABLE ferry_limit_gate_started (
    gate_id bigint PRIMARY KEY,
    started bigint NOT NULL
);

CREATE FUNCTION ferry_limit_gate_activate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.activated := nextval('ferry_limit_gate_activation');
    RETURN NEW;
END
$$;

CREATE TRIGGER ferry_limit_gate_activate BEFORE UPDATE OF active ON ferry_limit_gate
    FOR EACH ROW WHEN (NEW.active AND NOT OLD.active)
    EXECUTE FUNCTION ferry_limit_gate_activate();
