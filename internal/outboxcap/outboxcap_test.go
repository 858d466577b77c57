package outboxcap

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/outbox"
)

// TestChainBudget: an ordered key's job goes on with its next messages
// (the outbox's default budget) unless a limit applies to delivery jobs.
func TestChainBudget(t *testing.T) {
	t.Parallel()
	routes, err := outbox.NewRoutes(outbox.Route{Topic: "account.changed", Name: "ledger", URL: "http://127.0.0.1:1/"})
	require.NoError(t, err)
	for _, tc := range []struct {
		limits []limit.Limit
		want   time.Duration
	}{
		{nil, 0},
		{[]limit.Limit{{Kind: "report.build", Concurrency: 2}, {Queue: "default", Concurrency: 5}}, 0},
		{[]limit.Limit{{Kind: "outbox.deliver", Concurrency: 2}}, -1},
		{[]limit.Limit{{Queue: outbox.Queue, Rate: limit.Rate{Count: 10, Period: time.Second}}}, -1},
		{[]limit.Limit{{Queue: outbox.QueueFor("ledger"), Rate: limit.Rate{Count: 10, Period: time.Second}}}, -1},
		{[]limit.Limit{{Queue: outbox.QueueFor("other"), Concurrency: 1}}, 0},
	} {
		require.Equal(t, tc.want, ChainBudget(tc.limits, routes), "%+v", tc.limits)
	}
}
