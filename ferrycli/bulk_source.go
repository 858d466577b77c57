package ferrycli

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// bulkSource reads the input twice: a file is opened again, stdin is kept in
// memory by the first pass.
type bulkSource struct {
	path  string // "" for stdin
	stdin io.Reader
	spool spool
	files []*os.File // opened, to close
}

func openBulkSource(name string, stdin io.Reader) (*bulkSource, error) {
	if name == "-" {
		return &bulkSource{stdin: stdin}, nil
	}
	st, err := os.Stat(name)
	if err != nil {
		return nil, usageErrorf("--file: %v", err)
	}
	if st.IsDir() {
		return nil, usageErrorf("--file %s: is a directory", name)
	}
	return &bulkSource{path: name}, nil
}

// first returns the reader of the first pass and its size (-1 if unknown).
func (s *bulkSource) first() (io.Reader, int64, error) {
	if s.path == "" {
		return io.TeeReader(s.stdin, &s.spool), -1, nil
	}
	f, err := s.open()
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("bulk: %w", err)
	}
	return f, st.Size(), nil
}

func (s *bulkSource) second() (io.Reader, error) {
	if s.path == "" {
		return s.spool.reader(), nil
	}
	return s.open()
}

func (s *bulkSource) open() (*os.File, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, usageErrorf("--file: %v", err)
	}
	s.files = append(s.files, f)
	return f, nil
}

func (s *bulkSource) close() {
	for _, f := range s.files {
		_ = f.Close() // read only
	}
}

// spoolChunk is the size of the pieces stdin is kept in.
const spoolChunk = 1 << 20

// spool keeps what is written to it in chunks: growing one buffer would copy
// it, and hold it twice for a moment.
type spool struct{ chunks [][]byte }

func (s *spool) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(s.chunks) == 0 || len(s.chunks[len(s.chunks)-1]) == spoolChunk {
			s.chunks = append(s.chunks, make([]byte, 0, spoolChunk))
		}
		last := &s.chunks[len(s.chunks)-1]
		k := min(len(p), spoolChunk-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

func (s *spool) reader() io.Reader {
	rs := make([]io.Reader, len(s.chunks))
	for i, c := range s.chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}
