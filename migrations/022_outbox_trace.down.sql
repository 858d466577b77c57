ALTER TABLE ferry_outbox
    DROP COLUMN tracestate,
    DROP COLUMN traceparent;
