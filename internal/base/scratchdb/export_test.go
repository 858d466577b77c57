package scratchdb

// SetBeforeClone sets the hook that runs between the template's check and
// its clone, for the test of a template dropped by another run.
func SetBeforeClone(f func(tmpl string)) { beforeClone = f }
