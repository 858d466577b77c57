package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOutboxLagsTail(t *testing.T) {
	t.Parallel()
	var l outboxLags
	// 198 quick messages and two slow ones: the p99 of 200 is the 199th,
	// so the tail is the two slow ones, whose legs differ.
	for range 198 {
		l.leg = append(l.leg, legs{relay: 1, fetch: 1, work: 1, total: 3})
	}
	l.leg = append(l.leg, legs{relay: 2, fetch: 30, work: 4, total: 36}, legs{relay: 2, fetch: 40, work: 4, total: 46})
	relay, fetch, work, n := l.tail()
	require.Equal(t, 2, n)
	require.Equal(t, 2.0, relay)
	require.Equal(t, 40.0, fetch, "the upper median of two")
	require.Equal(t, 4.0, work)

	relay, fetch, work, n = outboxLags{}.tail()
	require.Zero(t, n, "no messages, no tail")
	require.Zero(t, relay+fetch+work)
}
