package redact

import (
	"context"
	"errors"
	"net/url"
	"strings"
)

// Placeholder replaces a secret wherever a Scrubber finds it.
const Placeholder = "[redacted]"

// A Scrubber replaces one secret, in every form a URL or an echo of one may
// carry it, with Placeholder. A nil *Scrubber, like one of the empty
// secret, scrubs nothing. It is safe for concurrent use.
type Scrubber struct {
	r *strings.Replacer
}

// Secret returns a Scrubber of secret: the secret as is, path-escaped and
// query-escaped. Each prefix joined to a form is replaced first, keeping
// the prefix: with the prefix "bot", "bot<token>" becomes "bot[redacted]".
func Secret(secret string, prefixes ...string) *Scrubber {
	if secret == "" {
		return &Scrubber{r: strings.NewReplacer()}
	}
	var pairs []string
	seen := map[string]bool{}
	for _, form := range []string{secret, url.PathEscape(secret), url.QueryEscape(secret)} {
		if seen[form] {
			continue
		}
		seen[form] = true
		// The longer patterns first: "<prefix><secret>", then the bare
		// secret.
		for _, p := range prefixes {
			pairs = append(pairs, p+form, p+Placeholder)
		}
		pairs = append(pairs, form, Placeholder)
	}
	return &Scrubber{r: strings.NewReplacer(pairs...)}
}

// Replace returns s with the secret scrubbed.
func (sc *Scrubber) Replace(s string) string {
	if sc == nil {
		return s
	}
	return sc.r.Replace(s)
}

// Err returns err with the secret scrubbed from its message: err itself
// when the message does not contain it (or err is nil), else an error with
// the scrubbed message. That error does not unwrap to err (whose message,
// or a cause's, holds the secret), only to the context error err wraps, if
// any, so errors.Is(err, context.Canceled) keeps working.
func (sc *Scrubber) Err(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	clean := sc.Replace(msg)
	if clean == msg {
		return err
	}
	r := &scrubbedError{msg: clean}
	for _, sentinel := range []error{context.Canceled, context.DeadlineExceeded} {
		if errors.Is(err, sentinel) {
			r.err = sentinel
			break
		}
	}
	return r
}

// scrubbedError is an error whose message was scrubbed of a secret; it
// unwraps to a context sentinel only (or nil).
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }
