// Package e2e holds ferry's end-to-end tests: the real worker and enqueue
// binaries, built once per test run (internal/testkit/proctest), run as
// subprocesses against a Postgres database of each test's own
// (internal/base/pgtest), and stopped for real with SIGTERM and SIGKILL.
// The package has no code besides its tests.
//
// The tests assert what operators and monitors rely on: exit codes (0, 1, 2),
// one-line error messages, the JSON log lines marked as contract in DESIGN.md,
// and the rows left in river_job and the migration tables.
//
// Run them with the rest:
//
//	go test ./internal/e2e/
package e2e
