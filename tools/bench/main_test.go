package main

import (
	"testing"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestMain drops the package's database (pgtest.Pool) when the tests end,
// and checks for leaked goroutines.
func TestMain(m *testing.M) { pgtest.Main(m) }
