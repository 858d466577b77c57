-- ferry_broadcast_message: broadcast messages too large for a NOTIFY payload
-- (Postgres refuses 8,000 bytes or more). The publisher inserts the message
-- here, in its own transaction, and NOTIFYs a reference to the row; every
-- listening process reads the row when the reference arrives. Rows are
-- pruned after a short retention (package broadcast): a subscriber that
-- reads a pruned row gets a gap, as for any other missed message.
CREATE TABLE ferry_broadcast_message (
    id           bigserial   PRIMARY KEY,
    channel      text        NOT NULL CHECK (channel ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    data         text        NOT NULL CHECK (octet_length(data) <= 65536),
    published_at timestamptz NOT NULL,
    signature    text,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp()
);

CREATE INDEX ferry_broadcast_message_created_at ON ferry_broadcast_message (created_at);
