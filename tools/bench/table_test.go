package main

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// filledResults returns results with every figure set, each to a value of
// its own, and the figures by their results.json keys.
func filledResults(t *testing.T) (results, map[string]*float64) {
	t.Helper()
	var r results
	byKey := map[string]*float64{}
	var fill func(v reflect.Value)
	n := 0.0
	fill = func(v reflect.Value) {
		for i := range v.NumField() {
			field, sf := v.Field(i), v.Type().Field(i)
			if sf.Anonymous {
				fill(field)
				continue
			}
			if sf.Type != reflect.TypeFor[*float64]() {
				continue
			}
			n++
			p := ptr(n)
			field.Set(reflect.ValueOf(p))
			byKey[strings.Split(sf.Tag.Get("json"), ",")[0]] = p
		}
	}
	fill(reflect.ValueOf(&r).Elem())
	return r, byKey
}

// Every row checked against a target says which figure of
// bench/results.json it checks, and shows that figure: a key naming
// another figure would record a verdict on the wrong one.
func TestTableRows_KeysNameTheirFigures(t *testing.T) {
	r, byKey := filledResults(t)
	checked := 0
	for _, row := range tableRows(r) {
		if row.goal == nil {
			require.Empty(t, row.key, "row %q has a key but no target to check", row.label)
			continue
		}
		checked++
		p, ok := byKey[row.key]
		require.True(t, ok, "row %q: key %q is no figure of results", row.label, row.key)
		require.Same(t, p, row.v, "row %q shows another figure than its key %q", row.label, row.key)
		require.NotEmpty(t, row.target, "row %q: a goal without its target printed", row.label)
	}
	require.Greater(t, checked, 40, "the table checks every target")
}

// The verdicts: a figure past its bound is missed, one on it met, and a
// target without a figure is reported, never taken as met.
func TestCheckTargets(t *testing.T) {
	rows := []tableRow{
		{label: "p99", v: ptr(10), unit: "ms", target: "≤ 10 ms", key: "on_the_bound", goal: atMost(10)},
		{label: "p99", v: ptr(10.01), unit: "ms", target: "≤ 10 ms", key: "over", goal: atMost(10)},
		{label: "ratio", v: ptr(0.943), target: "≥ 0.97", key: "under", goal: atLeast(0.97)},
		{label: "ratio", v: ptr(0.5), target: "> 0.5", key: "not_above", goal: above(0.5)},
		{label: "ratio", v: nil, target: "≥ 0.8", key: "absent", goal: atLeast(0.8)},
		{label: "measured", v: ptr(3), target: "measured"},
	}
	missed, unmeasured := checkTargets(rows)
	require.Equal(t, []string{"over", "under", "not_above"}, missed)
	require.Equal(t, []string{"absent"}, unmeasured)
	require.Equal(t, []string{verdictMet, verdictMissed, verdictMissed, verdictMissed, verdictUnmeasured, ""},
		[]string{rows[0].verdict(), rows[1].verdict(), rows[2].verdict(), rows[3].verdict(), rows[4].verdict(), rows[5].verdict()})

	missed, unmeasured = checkTargets(rows[:1])
	require.NotNil(t, missed, "no target missed: [] in the file, not null")
	require.NotNil(t, unmeasured)
	require.Empty(t, missed)

	require.Equal(t, "0.943", format(ptr(0.943), ""), "a ratio is printed to three decimals")
	require.Equal(t, "0", format(ptr(0), ""), "a count is printed whole")
	require.Equal(t, "25.3 ms", format(ptr(25.266), "ms"))
	require.Equal(t, "null", format(nil, "ms"))
}

// The failover targets are figured from the tick and the elector's own
// default timeout, not rounded by hand: the partitioned leader may take a
// tick and its timeout (1,333.3 ms at a 1 s tick) to demote itself, and
// its successor the lease, a tick and the timeout, and a second more.
func TestFailoverTargets(t *testing.T) {
	goal := func(key string) func(float64) bool {
		for _, row := range tableRows(results{}) {
			if row.key == key {
				return row.goal.met
			}
		}
		t.Fatalf("no row checks %s", key)
		return nil
	}
	demotion := goal("partition_demotion_ms_max")
	require.True(t, demotion(1333.333), "a tick and its timeout is met")
	require.True(t, demotion(1330.7))
	require.False(t, demotion(1333.4))
	successor := goal("failover_partition_ms_max")
	require.True(t, successor(5666.666))
	require.False(t, successor(5666.7))
}
