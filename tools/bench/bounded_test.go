package main

import (
	"slices"
	"testing"
	"time"
)

// TestTurnOrder: over any run of variants! consecutive slices, every
// variant goes first as often as any other, and follows each other
// variant as often as any other.
func TestTurnOrder(t *testing.T) {
	for _, variants := range []int{1, 2, 3, 4} {
		fact := 1
		for i := 2; i <= variants; i++ {
			fact *= i
		}
		for start := range 3 * fact {
			first := map[int]int{}
			follows := map[[2]int]int{}
			for k := start; k < start+fact; k++ {
				order := turnOrder(variants, k)
				sorted := slices.Sorted(slices.Values(order))
				for i, v := range sorted {
					if v != i {
						t.Fatalf("variants %d, slice %d: order %v is not a permutation", variants, k, order)
					}
				}
				first[order[0]]++
				for j := 1; j < len(order); j++ {
					follows[[2]int{order[j-1], order[j]}]++
				}
			}
			for v := range variants {
				if first[v] != fact/variants {
					t.Fatalf("variants %d from slice %d: variant %d first %d times of %d, want %d", variants, start, v, first[v], fact, fact/variants)
				}
				for w := range variants {
					// w right after v: (variants-1)! of the variants! orders.
					if want := fact / variants; v != w && follows[[2]int{v, w}] != want {
						t.Fatalf("variants %d from slice %d: %d right after %d %d times, want %d", variants, start, w, v, follows[[2]int{v, w}], want)
					}
				}
			}
		}
	}
}

// TestTakeTurns: every variant does n jobs in all, in the slices asked
// for, and its rate is n over the time its turns took.
func TestTakeTurns(t *testing.T) {
	const n, slices, variants = 1003, 10, 3
	done := make([]int, variants)
	turns := make([]int, variants)
	rates, err := takeTurns(variants, n, slices, 2, func(i, k int) (time.Duration, error) {
		done[i] += k
		turns[i]++
		return time.Duration(k*(i+1)) * time.Millisecond, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range variants {
		if done[i] != n || turns[i] != slices {
			t.Fatalf("variant %d did %d jobs in %d turns, want %d in %d", i, done[i], turns[i], n, slices)
		}
		if want := 1000 / float64(i+1); rates[i] < want*0.999 || rates[i] > want*1.001 {
			t.Fatalf("variant %d: rate %f, want %f", i, rates[i], want)
		}
	}
}
