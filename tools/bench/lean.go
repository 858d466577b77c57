package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// leanResult is what a Go service that imports ferry's writer packages
// (jobs and outbox, to insert in its own transactions) pays in modules and
// binary size, against one that uses River with pgx alone.
type leanResult struct {
	Modules       int     `json:"lean_modules"`
	RiverModules  int     `json:"lean_river_modules"`
	BinaryMB      float64 `json:"lean_binary_mb"`
	RiverBinaryMB float64 `json:"lean_river_binary_mb"`
	BinaryRatio   float64 `json:"lean_binary_ratio"`
}

// leanFerrySource inserts a job and an outbox message in one transaction.
const leanFerrySource = `package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/outbox"
)

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "")
	if err != nil {
		panic(err)
	}
	ins, err := jobs.NewInserter(pool)
	if err != nil {
		panic(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := ins.InsertTx(ctx, tx, jobs.NoopArgs{}, nil); err != nil {
		panic(err)
	}
	if _, err := outbox.Add(ctx, tx, "order.placed", map[string]any{"order_id": 42}); err != nil {
		panic(err)
	}
	_ = tx.Commit(ctx)
}
`

// leanRiverSource is the same job insert with River alone.
const leanRiverSource = `package main

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

type noop struct{}

func (noop) Kind() string { return "ferry.noop" }

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "")
	if err != nil {
		panic(err)
	}
	client, err := river.NewClient[pgx.Tx](riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		panic(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	if _, err := client.InsertTx(ctx, tx, noop{}, nil); err != nil {
		panic(err)
	}
	_ = tx.Commit(ctx)
}
`

// leanConsumers builds both services as modules of their own (ferry's from
// this checkout, River at the version ferry requires), and counts their
// modules (go list -m all) and binary sizes.
func leanConsumers(ctx context.Context) (leanResult, error) {
	root, err := goCmd(ctx, "", "list", "-m", "-f", "{{.Dir}}")
	if err != nil {
		return leanResult{}, err
	}
	goVersion, err := goCmd(ctx, root, "list", "-m", "-f", "{{.GoVersion}}")
	if err != nil {
		return leanResult{}, err
	}
	var requires []string
	for _, m := range []string{"github.com/riverqueue/river", "github.com/riverqueue/river/riverdriver/riverpgxv5", "github.com/jackc/pgx/v5"} {
		v, err := goCmd(ctx, root, "list", "-m", "-f", "{{.Version}}", m)
		if err != nil {
			return leanResult{}, err
		}
		requires = append(requires, m+" "+v)
	}
	tmp, err := os.MkdirTemp("", "ferry-bench-lean-")
	if err != nil {
		return leanResult{}, err
	}
	defer os.RemoveAll(tmp)

	// Every ferry module from this checkout, as a service would get them
	// from the module proxy: the writer packages are modules of their own
	// (jobs, outbox, ...), each requiring only the ferry modules it needs.
	ferryMods, err := goCmd(ctx, root, "list", "-m", "-f", "{{.Path}} {{with .Replace}}{{.Path}}{{end}}", "all")
	if err != nil {
		return leanResult{}, err
	}
	var replaces []string
	for line := range strings.Lines(ferryMods) {
		path, dir, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || !strings.HasPrefix(path, "github.com/ferryq/ferry/") {
			continue
		}
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(root, dir)
		}
		replaces = append(replaces, path+" => "+dir)
	}
	if len(replaces) == 0 {
		return leanResult{}, fmt.Errorf("no ferry module replaced in %s/go.mod: the writer packages are modules of their own", root)
	}
	var res leanResult
	ferryMod := fmt.Sprintf("module example.com/ferryconsumer\n\ngo %s\n\nrequire (\n\tgithub.com/ferryq/ferry/jobs v0.0.0\n\tgithub.com/ferryq/ferry/outbox v0.0.0\n)\n\nreplace (\n\t%s\n)\n",
		goVersion, strings.Join(replaces, "\n\t"))
	if res.Modules, res.BinaryMB, err = leanBuild(ctx, filepath.Join(tmp, "ferry"), ferryMod, leanFerrySource); err != nil {
		return leanResult{}, fmt.Errorf("ferry consumer: %w", err)
	}
	riverMod := fmt.Sprintf("module example.com/riverconsumer\n\ngo %s\n\nrequire (\n\t%s\n)\n", goVersion, strings.Join(requires, "\n\t"))
	if res.RiverModules, res.RiverBinaryMB, err = leanBuild(ctx, filepath.Join(tmp, "river"), riverMod, leanRiverSource); err != nil {
		return leanResult{}, fmt.Errorf("River consumer: %w", err)
	}
	res.BinaryRatio = res.BinaryMB / res.RiverBinaryMB
	return res, nil
}

// leanBuild writes a module into dir, tidies it, and returns the number of
// modules go list -m all lists (the main module included) and the size of
// its binary in MB.
func leanBuild(ctx context.Context, dir, goMod, source string) (modules int, mb float64, err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(goMod), 0o644); err != nil {
		return 0, 0, err
	}
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(source), 0o644); err != nil {
		return 0, 0, err
	}
	if _, err := goCmd(ctx, dir, "mod", "tidy"); err != nil {
		return 0, 0, err
	}
	list, err := goCmd(ctx, dir, "list", "-m", "all")
	if err != nil {
		return 0, 0, err
	}
	bin := filepath.Join(dir, "consumer")
	if _, err := goCmd(ctx, dir, "build", "-trimpath", "-o", bin, "."); err != nil {
		return 0, 0, err
	}
	st, err := os.Stat(bin)
	if err != nil {
		return 0, 0, err
	}
	return len(strings.Split(list, "\n")), float64(st.Size()) / 1e6, nil
}

// goCmd runs the go command in dir (the current directory when empty),
// outside any workspace, and returns its trimmed standard output. It
// never changes a go.mod or go.sum but by go mod tidy (-mod=readonly,
// over a GOFLAGS of the caller's): under -mod=mod, go list -m all on the
// checkout added the sums of every module in its graph to go.sum, which
// go mod tidy then took out again.
func goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return "", fmt.Errorf("go %s: %w: %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}
