package redact

import (
	"errors"
	"net/url"
)

// URL returns raw without its userinfo and fragment, and with its query
// string, when it has one, replaced by "…": "https://u:p@h/x?k=v#f" becomes
// "https://h/x?…". A raw that does not parse is "(unparsable url)". An
// opaque URL (no "//" after the scheme: "user:pw@host" parses as scheme
// "user") keeps only its scheme: "user:…".
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable url)"
	}
	if u.Opaque != "" {
		return u.Scheme + ":…"
	}
	u.User = nil
	if u.RawQuery != "" {
		u.RawQuery = "…"
	}
	u.Fragment = ""
	return u.String()
}

// URLError returns the cause of the first *url.Error in err's chain, whose
// own message repeats the full URL (query string and userinfo included);
// err itself when there is none. What wrapped the *url.Error is dropped
// with it: callers name the request themselves, with URL.
func URLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
