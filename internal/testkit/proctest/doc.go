// Package proctest runs real binaries as subprocesses in tests: ferry's
// end-to-end tests, and the election tests that kill leaders for real. It is
// internal/testkit/fleet made for tests: a failure fails the test, and the
// test's end cleans up.
//
// # Building
//
// Build compiles main packages of this module (such as "./cmd/worker") with
// `go build`, once per test process however many tests ask, into a temporary
// directory. A failed build fails every test that asked for it, with the
// compiler's output.
//
// The directory is removed after the tests by pgtest.Main (Build registers
// Cleanup with pgtest.AtExit). A test process killed before that leaves its
// directory behind; the next Build of any test process removes directories
// whose process is gone.
//
// # Processes
//
// Start runs a binary as fleet.Start does: in a process group of its own,
// with PATH, HOME and TMPDIR from the test's own environment plus the
// variables the test gives (a DATABASE_URL or FERRY_* setting in the
// developer's shell never reaches a child), its output kept in memory, and a
// parent-death signal so that a test binary killed by `go test -timeout` does
// not leave workers running. A Proc has fleet.Proc's methods: Stdout,
// Stderr, WaitForLine, Signal, Kill (SIGKILL to the whole group, like kill
// -9) and Wait. When the test ends, a process still running is killed, and if
// the test failed its output is logged.
//
// Run is the one-shot form for CLI calls: it returns stdout, stderr and the
// exit code.
//
// # Exit codes
//
// Wait reports a process ended by a signal as 128 plus the signal number, as
// a shell does (137 after Kill); ProcessState has the details.
package proctest
