// Package fleet runs ferry's binaries as real processes, for the tests
// (through proctest), the chaos suite and the bench: it builds main packages
// once, starts each process in a process group of its own, keeps its output,
// reads its JSON log records, waits for a matching line or record, and
// signals or kills it. It does not import testing, so commands can use it;
// proctest wraps it for tests.
//
// # Building
//
// A Builder compiles main packages of the module that governs the working
// directory (such as "./cmd/worker") with one `go build` into its directory,
// each package once however often it is asked for. Binaries are named after
// the last element of their package path. A failed build is remembered: a
// later call for that package returns the same error without building again.
//
// # Processes
//
// Start runs a binary in a process group of its own, with an environment made
// of PATH, HOME and TMPDIR from this process's environment plus the variables
// the caller gives: a DATABASE_URL or FERRY_* setting in the developer's shell
// never reaches a child. stdout and stderr are kept in memory; the Proc
// methods read them (Stdout, Stderr, Tail) and wait on them (WaitForLine,
// WaitForLineFunc), woken by each write rather than by polling. Signal (to
// the process), Kill (SIGKILL to the whole group, like kill -9) and Wait
// drive it.
//
// The children are started with a parent-death signal, so a test binary
// killed by `go test -timeout`, or a bench stopped with Ctrl-C, does not leave
// workers running. Linux sends that signal when the thread that forked the
// child exits, so each child is started and waited for on a locked thread.
//
// # Fleets and log records
//
// A Fleet is a group of processes started together, like three workers of one
// deployment. Its processes' output wakes one shared waiter, so a caller can
// wait for a log record from any of them: Mark notes how far every output has
// been read, and WaitForRecord returns the first record after the mark that
// matches. A Record is one JSON log line as slog writes it: time, level, msg
// and the other attributes.
//
// # Exit codes
//
// Wait reports a process ended by a signal as 128 plus the signal number, as
// a shell does (137 after Kill); ProcessState has the details.
package fleet
