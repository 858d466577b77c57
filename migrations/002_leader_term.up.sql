-- ferry_leader_term: one row per leadership term of an election key. A
-- graceful leader stamps resigned_at before it unlocks; a new leader whose
-- predecessor's row is unstamped defers its start (see package election).
CREATE TABLE ferry_leader_term (
    term         bigserial   PRIMARY KEY,
    key          bigint      NOT NULL,
    holder       text        NOT NULL,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    backend_pid  integer     NOT NULL,
    acquired_at  timestamptz NOT NULL DEFAULT now(),
    started_at   timestamptz,
    resigned_at  timestamptz,
    ended_reason text
);

CREATE INDEX ferry_leader_term_key_term ON ferry_leader_term (key, term DESC);
