package ferrycli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows bars on stderr when it is a terminal, and nothing
// otherwise.
type progress struct {
	w   io.Writer
	tty bool
	bar *progressbar.ProgressBar
}

func newProgress(w io.Writer) *progress { return &progress{w: w, tty: isTerminal(w)} }

// reader returns r, counting its bytes on a bar (a spinner when size < 0).
func (p *progress) reader(r io.Reader, size int64, desc string) io.Reader {
	if !p.tty {
		return r
	}
	p.bar = progressbar.NewOptions64(size,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionShowBytes(true),
		progressbar.OptionShowTotalBytes(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionFullWidth(),
		progressbar.OptionSpinnerType(14),
		progressbar.OptionSetRenderBlankState(true),
	)
	rd := progressbar.NewReader(r, p.bar)
	return &rd
}

// done clears the current bar, so what follows starts on a clean line.
func (p *progress) done() {
	if p.bar != nil {
		_ = p.bar.Clear()
		p.bar = nil
	}
}

// thousands formats n with commas: 161,000.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// fmtSeconds prints a duration in seconds with two significant decimals
// below 1s: 0.042s, 6.2s.
func fmtSeconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.2gs", s)
	}
	return fmt.Sprintf("%.1fs", s)
}
