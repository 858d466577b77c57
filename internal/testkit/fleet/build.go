package fleet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// Builder builds main packages of the module into Dir, each once. Its zero
// value with Dir set is ready; it is safe for concurrent use, and a build in
// progress holds back other calls until it is done.
type Builder struct {
	// Dir is where the binaries go. It must exist; the caller removes it.
	Dir string

	mu   sync.Mutex
	root string
	bins map[string]string
	errs map[string]error
}

// Build compiles the named main packages (paths relative to the module root,
// like "./cmd/worker", or full import paths) and returns the path of each
// binary, keyed by the package as given. Packages not built before are built
// by one go command, so they fail together; a failed package fails every
// later call the same way without building again. The error names the first
// package that failed.
//
// Binaries are named after the last element of their package path, so two
// packages that share it cannot both be built into one Dir.
func (b *Builder) Build(pkgs ...string) (map[string]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.bins == nil {
		b.bins, b.errs = map[string]string{}, map[string]error{}
	}
	var missing []string
	for _, pkg := range pkgs {
		_, built := b.bins[pkg]
		_, failed := b.errs[pkg]
		if !built && !failed && !slices.Contains(missing, pkg) {
			missing = append(missing, pkg)
		}
	}
	if len(missing) > 0 {
		if err := b.build(missing); err != nil {
			for _, pkg := range missing {
				b.errs[pkg] = err
			}
		}
	}
	out := make(map[string]string, len(pkgs))
	for _, pkg := range pkgs {
		if err := b.errs[pkg]; err != nil {
			return nil, fmt.Errorf("build %s: %w", pkg, err)
		}
		out[pkg] = b.bins[pkg]
	}
	return out, nil
}

// build runs one `go build` for pkgs in the module root. b.mu is held.
func (b *Builder) build(pkgs []string) error {
	if b.Dir == "" {
		return errors.New("fleet: Builder.Dir is not set")
	}
	if b.root == "" {
		root, err := moduleRoot()
		if err != nil {
			return err
		}
		b.root = root
	}
	want := map[string]string{}
	for _, pkg := range pkgs {
		name := path.Base(path.Clean(filepath.ToSlash(pkg)))
		bin := filepath.Join(b.Dir, name)
		for other, p := range b.bins {
			if p == bin {
				return fmt.Errorf("binary name %q is taken by %s", name, other)
			}
		}
		for other, p := range want {
			if p == bin {
				return fmt.Errorf("binary name %q is shared with %s", name, other)
			}
		}
		want[pkg] = bin
	}
	// -buildvcs=false: no VCS stamping, so the build runs no git command and
	// works outside a checkout.
	args := append([]string{"build", "-buildvcs=false", "-o", b.Dir + string(filepath.Separator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = b.root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, out.Bytes())
	}
	for pkg, bin := range want {
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("go build wrote no %s: is %s a main package?", filepath.Base(bin), pkg)
		}
		b.bins[pkg] = bin
	}
	return nil
}

// moduleRoot is the directory of the go.mod that governs the working
// directory (go test runs a test binary in its package's directory; the
// Taskfile runs the commands in the repository's root).
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside a Go module (go env GOMOD is empty)")
	}
	return filepath.Dir(gomod), nil
}
