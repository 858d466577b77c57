-- An outbox message keeps the W3C trace context of the transaction that
-- wrote it (outbox.Add stores the caller's span; a plain-SQL writer may set
-- the columns itself), so that its relay, its delivery jobs and the
-- webhook requests join the writer's trace. NULL: not traced. The format
-- is checked here, for every writer: version 00, a trace id and a parent
-- id that are not all zeros, and the flags.
ALTER TABLE ferry_outbox
    ADD COLUMN traceparent text,
    ADD COLUMN tracestate text,
    ADD CONSTRAINT ferry_outbox_traceparent_format CHECK (
        traceparent IS NULL OR (
            traceparent ~ '^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
            AND substr(traceparent, 4, 32) <> repeat('0', 32)
            AND substr(traceparent, 37, 16) <> repeat('0', 16))),
    ADD CONSTRAINT ferry_outbox_tracestate_length CHECK (
        tracestate IS NULL OR (traceparent IS NOT NULL AND octet_length(tracestate) <= 512));
