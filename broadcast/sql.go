package broadcast

// The package's SQL, in one place.
const (
	sqlNotify = `SELECT pg_notify($1, $2)`

	// sqlInsertLarge stores a large message and NOTIFYs a reference to it,
	// in one statement (so in the caller's transaction, or its own).
	sqlInsertLarge = `WITH m AS (
    INSERT INTO ferry_broadcast_message (channel, data, published_at, signature)
    VALUES ($1, $2, $3, $4)
    RETURNING id
)
SELECT pg_notify($5, json_build_object('c', $1::text, 't', $6::bigint, 's', $4::text, 'r', m.id)::text) FROM m`

	sqlFetchLarge = `SELECT channel, data, published_at FROM ferry_broadcast_message WHERE id = $1`

	sqlPrune = `DELETE FROM ferry_broadcast_message WHERE created_at < clock_timestamp() - $1::bigint * interval '1 microsecond'`
)
