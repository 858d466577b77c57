package jobs

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// MaxErrorBytes bounds the message of a job's error as River stores it (in
// river_job.errors, which dead letters show) and ferry logs it.
const MaxErrorBytes = 2048

// KindOption is an option of Define.
type KindOption func(*Kind)

// SensitiveErrors declares that the kind's errors may hold personal data or
// secrets: of an error (or a panic) of its worker, only the type is stored
// and logged, never the message. Matching with errors.Is and errors.As on
// the error is unchanged, so cancellation, snoozing and interruption work as
// before.
func SensitiveErrors() KindOption { return func(k *Kind) { k.SensitiveErrors = true } }

// StoredError is the error ErrorMiddleware returns in place of a worker's
// error whose message it bounds or withholds. Error is what River stores
// and ferry logs; Unwrap returns the worker's error.
type StoredError struct {
	// Type is the Go type of the worker's error: the first in its chain
	// that is not a plain wrapper (fmt.Errorf's, errors.Join's), or
	// "panic <type>" for a panic.
	Type string
	// Sensitive: the message is withheld.
	Sensitive bool
	// Message is the worker's message, cut to MaxErrorBytes ("" when
	// Sensitive).
	Message string

	err error
}

func (e *StoredError) Error() string {
	if e.Sensitive {
		return e.Type + ": message withheld: the kind's errors are sensitive"
	}
	return e.Message
}

func (e *StoredError) Unwrap() error { return e.err }

// ErrorMiddleware returns the River worker middleware that bounds the
// message of every worker error to MaxErrorBytes and, for kinds for which
// sensitive returns true, keeps only its type (see SensitiveErrors). The
// server installs it innermost, so that its own log line and River's
// record see the result. Cancellation (river.JobCancel) is kept around the
// rewritten error; a snooze passes as it is.
func ErrorMiddleware(sensitive func(kind string) bool) rivertype.Middleware {
	return &errorMiddleware{sensitive: sensitive}
}

type errorMiddleware struct {
	river.MiddlewareDefaults
	sensitive func(kind string) bool
}

var _ rivertype.WorkerMiddleware = (*errorMiddleware)(nil)

func (m *errorMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if !m.isSensitive(job.Kind) {
				panic(v) // River records it, with its trace
			}
			// River would store the panic's value and trace.
			err = &StoredError{Type: fmt.Sprintf("panic %T", v), Sensitive: true, err: errors.New("panic in a sensitive kind's worker")}
		}
	}()
	if err = doInner(ctx); err == nil {
		return nil
	}
	return boundError(err, m.isSensitive(job.Kind))
}

func (m *errorMiddleware) isSensitive(kind string) bool {
	return m.sensitive != nil && m.sensitive(kind)
}

// boundError rewrites err as ErrorMiddleware says.
func boundError(err error, sensitive bool) error {
	if err == nil {
		return nil
	}
	var snooze *rivertype.JobSnoozeError
	if errors.As(err, &snooze) {
		return err
	}
	var cancel *rivertype.JobCancelError
	if errors.As(err, &cancel) {
		inner := cancel.Unwrap()
		if inner == nil {
			return err
		}
		if b := boundError(inner, sensitive); b != inner {
			return river.JobCancel(b)
		}
		return err
	}
	if sensitive {
		return &StoredError{Type: errorType(err), Sensitive: true, err: err}
	}
	msg := err.Error()
	if len(msg) <= MaxErrorBytes {
		return err
	}
	cut := MaxErrorBytes - 40
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return &StoredError{Type: errorType(err), Message: fmt.Sprintf("%s… (%d more bytes cut)", msg[:cut], len(msg)-cut), err: err}
}

// errorType names err's type: the first in its chain that is not a plain
// wrapper.
func errorType(err error) string {
	first := fmt.Sprintf("%T", err)
	for e := err; e != nil; e = errors.Unwrap(e) {
		switch t := fmt.Sprintf("%T", e); t {
		case "*fmt.wrapError", "*fmt.wrapErrors", "*errors.joinError", "*errors.errorString":
		default:
			return t
		}
	}
	return first
}
