package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestOutbox_ResetSaysWhatItDid: outbox reset reports each message: its
// stuck deliveries reset, a stuck message back to the relay, nothing stuck,
// or not found (exit 1).
func TestOutbox_ResetSaysWhatItDid(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := context.Background()

	pending := addMessage(t, url, `{"order_id":1}`)
	stuck := addMessage(t, url, `{"order_id":2}`)
	// As the relay leaves a message whose topic has no route.
	_, err := pool.Exec(ctx, `UPDATE ferry_outbox SET status = 'stuck', last_error = 'no route for topic' WHERE id = $1`, stuck)
	require.NoError(t, err)

	stdout, stderr, code := enqueue(t, url, nil, "outbox", "reset", fmt.Sprint(pending), fmt.Sprint(stuck), "99999")
	require.Equal(t, 1, code, stderr)
	require.Equal(t, "enqueue: 1 of 3 messages not found", oneLine(t, stderr))
	require.Equal(t, fmt.Sprintf("message %d: nothing stuck (pending): left as it is\n"+
		"message %d: stuck message back to the relay, to be routed again\n"+
		"message 99999: not found\n", pending, stuck), stdout)
	var status string
	require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM ferry_outbox WHERE id = $1`, stuck).Scan(&status))
	require.Equal(t, "pending", status, "back to the relay")

	stdout, stderr, code = enqueue(t, url, nil, "outbox", "reset", "99999", "--json")
	require.Equal(t, 1, code, stderr)
	require.JSONEq(t, `{"error": "1 of 1 messages not found", "exit_code": 1}`, oneLine(t, stderr))
	var out struct {
		Messages int `json:"messages"`
		Results  []struct {
			ID     int64  `json:"id"`
			OK     bool   `json:"ok"`
			Result string `json:"result"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(stdout), &out), stdout)
	require.Zero(t, out.Messages)
	require.Len(t, out.Results, 1)
	require.False(t, out.Results[0].OK)
	require.Equal(t, "not found", out.Results[0].Result)
}

// TestOutbox_AddDuplicateDedupKey: a second outbox add with the same dedup
// key returns the first message's id, saying so, as job --unique-key does.
func TestOutbox_AddDuplicateDedupKey(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	stdout, stderr, code := enqueue(t, url, nil, "outbox", "add", "order.placed", "--payload", `{"order_id":7}`, "--dedup-key", "order-7")
	require.Zero(t, code, stderr)
	id, err := strconv.ParseInt(strings.TrimSpace(stdout), 10, 64)
	require.NoError(t, err, stdout)

	stdout, stderr, code = enqueue(t, url, nil, "outbox", "add", "order.placed", "--payload", `{"order_id":8}`, "--dedup-key", "order-7")
	require.Zero(t, code, stderr)
	require.Empty(t, stderr)
	require.Equal(t, fmt.Sprintf("dedup key matched existing message %d (order.placed, pending); nothing written", id), oneLine(t, stdout))

	var out struct {
		ID        int64 `json:"id"`
		Duplicate bool  `json:"duplicate"`
	}
	enqueueOK(t, url, &out, "outbox", "add", "order.placed", "--dedup-key", "order-7")
	require.Equal(t, id, out.ID)
	require.True(t, out.Duplicate)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox`), "nothing written")
	var payload string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT payload::text FROM ferry_outbox WHERE id = $1`, id).Scan(&payload))
	require.JSONEq(t, `{"order_id":7}`, payload, "the first message stays as written")
}

// TestOutbox_AddOrderingKey: outbox add --ordering-key writes the key; a
// bad one is one line, exit 2, nothing written; list --status blocked is
// accepted (nothing blocked here), a status it does not know is not.
func TestOutbox_AddOrderingKey(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	var out struct {
		ID int64 `json:"id"`
	}
	enqueueOK(t, url, &out, "outbox", "add", "account.changed", "--payload", `{"balance":10}`, "--ordering-key", "acct-42")
	var key string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT ordering_key FROM ferry_outbox WHERE id = $1`, out.ID).Scan(&key))
	require.Equal(t, "acct-42", key)

	for _, bad := range []string{"", strings.Repeat("k", 257)} {
		stdout, stderr, code := enqueue(t, url, nil, "outbox", "add", "account.changed", "--payload", `{}`, "--ordering-key", bad)
		require.Equal(t, 2, code, "stdout %q stderr %q", stdout, stderr)
		require.Contains(t, oneLine(t, stderr), "invalid ordering key")
	}
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox`), "nothing written")

	list := outboxList(t, url)
	require.Len(t, list, 1)
	require.Equal(t, "acct-42", *list[0].OrderingKey)
	require.Empty(t, outboxList(t, url, "--status", "blocked"))
	_, stderr, code := enqueue(t, url, nil, "outbox", "list", "--status", "jammed")
	require.Equal(t, 2, code)
	require.Contains(t, oneLine(t, stderr), "want pending, relayed, delivered, stuck, waiting or blocked")
}
