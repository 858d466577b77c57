package ferry

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// readmeMaxLines is the README's budget: what ferry is, the set-up, the
// tour, the capability table, embedding, and a link to docs/README.md.
// Everything else lives in docs/.
const readmeMaxLines = 300

var (
	// docFence is a fenced code block; docInlineCode a code span. Links are not
	// looked for in either (Go's generics read like links: Define[A](w)).
	docFence      = regexp.MustCompile("(?ms)^```.*?^```")
	docInlineCode = regexp.MustCompile("`[^`]*`")
	// docLink is a Markdown link's target.
	docLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)
	// docHeading is a Markdown heading's text.
	docHeading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	// docNotInAnchor is what GitHub drops from a heading to make its anchor.
	docNotInAnchor = regexp.MustCompile(`[^\p{L}\p{N} _-]`)
)

// TestREADME_Short: the README stays a front door, not a manual.
func TestREADME_Short(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	lines := strings.Count(string(b), "\n")
	require.LessOrEqual(t, lines, readmeMaxLines, "README.md has %d lines: move the detail to a page of docs/ and link it", lines)
}

// TestDocs_LinksResolve: every relative link in README.md and the pages of
// docs/ names a file of the repository, and every #anchor on a Markdown page
// names one of its headings.
func TestDocs_LinksResolve(t *testing.T) {
	t.Parallel()
	pages := []string{"README.md"}
	require.NoError(t, filepath.WalkDir("docs", func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	}))
	require.Greater(t, len(pages), 10, "docs/ has its pages")

	for _, page := range pages {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		text := docInlineCode.ReplaceAllString(docFence.ReplaceAllString(string(b), ""), "")
		for _, m := range docLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), file)
			}
			if _, err := os.Stat(path); err != nil {
				t.Errorf("%s links %s: %s does not exist", page, target, path)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !hasAnchor(t, path, anchor) {
				t.Errorf("%s links %s: %s has no heading whose anchor is #%s", page, target, path, anchor)
			}
		}
	}
}

// hasAnchor reports whether the Markdown file at path has a heading whose
// GitHub anchor is anchor.
func hasAnchor(t *testing.T, path, anchor string) bool {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for _, m := range docHeading.FindAllStringSubmatch(docFence.ReplaceAllString(string(b), ""), -1) {
		slug := strings.ToLower(docNotInAnchor.ReplaceAllString(m[1], ""))
		if strings.ReplaceAll(slug, " ", "-") == anchor {
			return true
		}
	}
	return false
}
