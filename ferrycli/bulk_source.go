package ferrycli

import (
	"io"
	"os"
)

// openBulkSource opens the input: stdin for "-", or the file name. size is
// the file's size, -1 for stdin; closeSrc closes what was opened.
func openBulkSource(name string, stdin io.Reader) (r io.Reader, size int64, closeSrc func(), err error) {
	if name == "-" {
		return stdin, -1, func() {}, nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, nil, usageErrorf("--file: %v", err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		err = usageErrorf("--file: %v", err)
	case st.IsDir():
		err = usageErrorf("--file %s: is a directory", name)
	}
	if err != nil {
		_ = f.Close()
		return nil, 0, nil, err
	}
	return f, st.Size(), func() { _ = f.Close() }, nil // read only
}
