package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
)

// Standard Webhooks from the receiver's side: a running worker's deliveries
// verified by the official package for Node.js and by the project's Go
// library, neither of them ferry's code, through a secret rotation.

const (
	// nodeReceiverDir holds the Node.js receiver and its locked
	// dependencies (the standardwebhooks package from the npm registry).
	nodeReceiverDir = "testdata/standardwebhooks"
	// npmTimeout bounds the install of the receiver's dependencies.
	npmTimeout = 3 * time.Minute
)

// nodeReceiver installs the Node.js receiver's dependencies with `npm ci`
// in a directory of the test's, starts it with secrets (path to secret),
// and returns its base URL and the process.
func nodeReceiver(t *testing.T, secrets map[string]string) (string, *proctest.Proc) {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNpm := exec.LookPath("npm")
	if errNode != nil || errNpm != nil {
		t.Fatalf("node and npm are needed to verify deliveries with the standardwebhooks package: run `go tool task node` (node: %v, npm: %v)", errNode, errNpm)
	}
	dir := t.TempDir()
	for _, f := range []string{"package.json", "package-lock.json", "receiver.js"} {
		b, err := os.ReadFile(filepath.Join(nodeReceiverDir, f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o600))
	}
	ctx, cancel := context.WithTimeout(context.Background(), npmTimeout)
	defer cancel()
	install := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	install.Dir = dir
	out, err := install.CombinedOutput()
	require.NoError(t, err, "npm ci of the standardwebhooks package:\n%s", out)

	b, err := json.Marshal(secrets)
	require.NoError(t, err)
	p := proctest.Start(t, node, []string{"RECEIVER_SECRETS=" + string(b)}, filepath.Join(dir, "receiver.js"))
	line, err := p.WaitForLine(startTimeout, `{"listening":`)
	require.NoError(t, err, "the Node.js receiver did not start: %s", p.Stderr())
	var l struct{ Listening int }
	require.NoError(t, json.Unmarshal([]byte(line), &l), line)
	require.NotZero(t, l.Listening, line)
	return fmt.Sprintf("http://127.0.0.1:%d", l.Listening), p
}

// verdict is one receiver's word on one request.
type verdict struct {
	Path  string `json:"path"`
	ID    string `json:"id"`
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// nodeVerdicts parses the Node.js receiver's lines so far.
func nodeVerdicts(t *testing.T, p *proctest.Proc) []verdict {
	t.Helper()
	var out []verdict
	for line := range strings.Lines(p.Stdout()) {
		if strings.HasPrefix(line, `{"listening":`) {
			continue
		}
		var v verdict
		require.NoError(t, json.Unmarshal([]byte(line), &v), "receiver line %q", line)
		out = append(out, v)
	}
	return out
}

// goReceiver verifies each request with the Standard Webhooks Go library:
// path to secret, as nodeReceiver. It answers and records as the Node.js
// one does.
type goReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	verdicts []verdict
}

func newGoReceiver(t *testing.T, secrets map[string]string) *goReceiver {
	t.Helper()
	hooks := map[string]*standardwebhooks.Webhook{}
	for path, secret := range secrets {
		var (
			wh  *standardwebhooks.Webhook
			err error
		)
		if strings.HasPrefix(secret, "whsec_") {
			wh, err = standardwebhooks.NewWebhook(secret)
		} else {
			wh, err = standardwebhooks.NewWebhookRaw([]byte(secret))
		}
		require.NoError(t, err)
		hooks[path] = wh
	}
	g := &goReceiver{}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		v := verdict{Path: r.URL.Path, ID: r.Header.Get("webhook-id")}
		switch wh := hooks[r.URL.Path]; {
		case err != nil:
			v.Error = err.Error()
		case wh == nil:
			v.Error = "no such path"
		default:
			if err := wh.Verify(body, r.Header); err != nil {
				v.Error = err.Error()
			} else {
				v.OK = true
			}
		}
		g.mu.Lock()
		g.verdicts = append(g.verdicts, v)
		g.mu.Unlock()
		if !v.OK {
			http.Error(w, v.Error, http.StatusUnauthorized)
		}
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *goReceiver) seen() []verdict {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]verdict(nil), g.verdicts...)
}

// TestOutbox_StandardWebhooksRotation delivers one message in each step of
// a secret rotation from a real worker to four receivers: the Node.js
// package and the Go library, each holding the old secret (raw) at /old
// and the new one (whsec_) at /new. The worker signs with the old secret,
// then with both, then with the new one; each receiver accepts exactly the
// messages signed with its secret and refuses the others (401: stuck at
// once), so a verifier that accepted anything would fail the test.
func TestOutbox_StandardWebhooksRotation(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)

	const (
		oldSecret = "an-old-raw-secret-of-32-bytes..."
		newSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	)
	secrets := map[string]string{"/old": oldSecret, "/new": newSecret}
	nodeURL, node := nodeReceiver(t, secrets)
	goRecv := newGoReceiver(t, secrets)
	routes := map[string]string{
		"node-old": nodeURL + "/old", "node-new": nodeURL + "/new",
		"go-old": goRecv.URL + "/old", "go-new": goRecv.URL + "/new",
	}
	var cfg strings.Builder
	cfg.WriteString("outbox:\n  routes:\n")
	for name, u := range routes {
		fmt.Fprintf(&cfg, "    - {topic: order.placed, name: %s, url: %q, secret_env: HOOK_SECRETS, timeout: 5s}\n", name, u)
	}
	cfgFile := writeConfig(t, cfg.String())

	for _, step := range []struct {
		name, secrets string
		accepted      []string // routes that deliver; the rest are stuck
	}{
		{"Old", oldSecret, []string{"node-old", "go-old"}},
		{"Both", newSecret + "," + oldSecret, []string{"node-old", "go-old", "node-new", "go-new"}},
		{"New", newSecret, []string{"node-new", "go-new"}},
	} {
		w := startWorker(t, url, []string{"FERRY_CONFIG=" + cfgFile, "HOOK_SECRETS=" + step.secrets})
		id := insertMessage(t, pool, fmt.Sprintf(`{"step":%q}`, step.name))
		for route := range routes {
			wantDelivered := slices.Contains(step.accepted, route)
			d := waitDelivery(t, pool, id, route, deliverTimeout, "delivered or stuck", func(d delivery) bool {
				return d.Status == "delivered" || d.Status == "stuck"
			})
			if wantDelivered {
				require.Equal(t, "delivered", d.Status, "step %s, route %s: %+v", step.name, route, d)
			} else {
				require.Equal(t, "stuck", d.Status, "step %s, route %s: %+v", step.name, route, d)
				require.NotNil(t, d.LastError)
				require.Contains(t, *d.LastError, "status 401", "step %s, route %s", step.name, route)
			}
		}
		stop(t, w, 30*time.Second)
		requireVerdicts(t, step.name, id, step.accepted, "node", nodeVerdicts(t, node))
		requireVerdicts(t, step.name, id, step.accepted, "go", goRecv.seen())
	}
}

// requireVerdicts checks that receiver side ("node" or "go") took message
// id once at each of its paths, accepting it where accepted names its route.
func requireVerdicts(t *testing.T, step string, id int64, accepted []string, side string, vs []verdict) {
	t.Helper()
	for _, path := range []string{"/old", "/new"} {
		var got []verdict
		for _, v := range vs {
			if v.ID == fmt.Sprint(id) && v.Path == path {
				got = append(got, v)
			}
		}
		require.Len(t, got, 1, "step %s: %s receiver at %s took message %d once: %+v", step, side, path, id, vs)
		want := slices.Contains(accepted, side+"-"+strings.TrimPrefix(path, "/"))
		require.Equal(t, want, got[0].OK, "step %s: %s receiver at %s: %+v", step, side, path, got[0])
	}
}
