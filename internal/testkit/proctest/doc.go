// Package proctest runs real binaries as subprocesses in tests: ferry's
// end-to-end tests, and the election tests that kill leaders for real.
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
// Start runs a binary in a process group of its own, with an environment made
// of PATH, HOME and TMPDIR from the test's own environment plus the variables
// the test gives: a DATABASE_URL or FERRY_* setting in the developer's shell
// never reaches a child. stdout and stderr are captured in memory; the Proc
// methods read them (Stdout, Stderr) and wait on them (WaitForLine), woken by
// each write rather than by polling. Signal, Kill (SIGKILL to the whole group,
// like kill -9) and Wait drive the process; when the test ends, a process
// still running is killed, and if the test failed its output is logged.
//
// The children are started with a parent-death signal, so a test binary
// killed by `go test -timeout` does not leave workers running.
//
// Run is the one-shot form for CLI calls: it returns stdout, stderr and the
// exit code.
//
// # Exit codes
//
// Wait reports a process ended by a signal as 128 plus the signal number, as
// a shell does (137 after Kill); ProcessState has the details.
package proctest
