package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

type testBundle struct {
	srv  *Server
	base string
}

func setup(t *testing.T, cfg Config) *testBundle {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	srv, err := New(cfg)
	require.NoError(t, err)
	require.NoError(t, srv.Start(context.Background()))
	t.Cleanup(srv.Stop)
	return &testBundle{srv: srv, base: "http://" + srv.Addr()}
}

func get(t *testing.T, url string, mod func(*http.Request)) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	if mod != nil {
		mod(req)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func TestNew_RefusesExposedAddressWithoutToken(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:9090", "[::]:9090", ":9090", "10.1.2.3:9090", "example.com:9090"} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			_, err := New(Config{Addr: addr})
			require.ErrorIs(t, err, ErrExposedWithoutToken)
			_, err = New(Config{Addr: addr, Token: "t"})
			require.NoError(t, err, "a token makes any address acceptable")
		})
	}
	for _, addr := range []string{"127.0.0.1:9090", "[::1]:9090", "localhost:9090"} {
		_, err := New(Config{Addr: addr})
		require.NoError(t, err, addr)
	}
	_, err := New(Config{Addr: "nonsense"})
	require.ErrorContains(t, err, "not host:port")
}

func TestServer_Endpoints(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ferry_test_gauge", Help: "test"})
	g.Set(7)
	reg.MustRegister(g)
	b := setup(t, Config{Gatherer: reg, Ready: func(context.Context) error { return nil }})

	code, body := get(t, b.base+"/healthz", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)

	code, body = get(t, b.base+"/readyz", nil)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", body)

	code, body = get(t, b.base+"/metrics", nil)
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "ferry_test_gauge 7")

	code, _ = get(t, b.base+"/nope", nil)
	require.Equal(t, http.StatusNotFound, code)
}

func TestServer_ReadyzFails(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Ready: func(context.Context) error { return errors.New("database unreachable") }})
	code, body := get(t, b.base+"/readyz", nil)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: database unreachable\n", body)
}

func TestServer_Token(t *testing.T) {
	t.Parallel()
	b := setup(t, Config{Token: "s3cret"})

	code, _ := get(t, b.base+"/healthz", nil)
	require.Equal(t, http.StatusOK, code, "healthz never needs the token")
	code, _ = get(t, b.base+"/readyz", nil)
	require.Equal(t, http.StatusOK, code, "readyz never needs the token")

	for _, path := range []string{"/metrics"} {
		t.Run(strings.TrimPrefix(path, "/"), func(t *testing.T) {
			code, body := get(t, b.base+path, nil)
			require.Equal(t, http.StatusUnauthorized, code)
			require.NotContains(t, body, "s3cret")
			require.Contains(t, body, "sign in at /admin/login")

			code, _ = get(t, b.base+path, func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") })
			require.Equal(t, http.StatusUnauthorized, code)

			code, _ = get(t, b.base+path, func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") })
			require.Equal(t, http.StatusOK, code)

			code, _ = get(t, b.base+path, func(r *http.Request) { r.SetBasicAuth("anyone", "s3cret") })
			require.Equal(t, http.StatusOK, code)

			code, _ = get(t, b.base+path, func(r *http.Request) { r.SetBasicAuth("s3cret", "") })
			require.Equal(t, http.StatusUnauthorized, code, "the token is the password, not the user")
		})
	}
}

// /readyz answers a probe that cannot send the token (a kubelet's), from
// any host, with the state alone; the reason, which may name the
// database's host, goes only to a request with the token. Everything else
// stays guarded.
func TestServer_ReadyzWithoutToken(t *testing.T) {
	t.Parallel()
	var ready atomic.Bool
	b := setup(t, Config{Token: "s3cret", Ready: func(context.Context) error {
		if ready.Load() {
			return nil
		}
		return errors.New("database unreachable: dial tcp db.internal:5432")
	}})
	probe := func(r *http.Request) { r.Host = "10.1.2.3:9090" } // a kubelet's Host: the pod's address

	code, body := get(t, b.base+"/readyz", probe)
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready\n", body, "no reason without the token")

	code, body = get(t, b.base+"/readyz", func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") })
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready\n", body, "no reason with a wrong token")

	code, body = get(t, b.base+"/readyz", func(r *http.Request) { r.Header.Set("Authorization", "Bearer s3cret") })
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not ready: database unreachable: dial tcp db.internal:5432\n", body)

	ready.Store(true)
	code, body = get(t, b.base+"/readyz", probe)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ready\n", body)

	for _, path := range []string{"/metrics", "/admin/", "/admin/api/summary", "/riverui/"} {
		code, _ = get(t, b.base+path, probe)
		require.Equal(t, http.StatusUnauthorized, code, "%s still needs the token", path)
	}
}

// The admin server has ferry's one lifecycle shape: Stop before Start and
// twice is safe, a second Start does nothing, Started and Stopped signal,
// and a stopped server serves again on Start.
func TestServer_Lifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := New(Config{Addr: "127.0.0.1:0"})
	require.NoError(t, err)
	srv.Stop() // before Start
	require.NoError(t, srv.Start(ctx))
	addr := srv.Addr()
	require.NoError(t, srv.Start(ctx), "a second Start is a no-op")
	require.Equal(t, addr, srv.Addr(), "still the first listener")
	<-srv.Started()
	stopped := srv.Stopped()
	code, _ := get(t, "http://"+addr+"/healthz", nil)
	require.Equal(t, http.StatusOK, code)
	srv.Stop()
	srv.Stop()
	<-stopped
	_, err = http.Get("http://" + addr + "/healthz")
	require.Error(t, err, "nothing listens after Stop")

	require.NoError(t, srv.Start(ctx))
	t.Cleanup(srv.Stop)
	code, _ = get(t, "http://"+srv.Addr()+"/healthz", nil)
	require.Equal(t, http.StatusOK, code, "a stopped server serves again")
}

func TestServer_SameOrigin(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{Logger: slog.New(slog.DiscardHandler)}}
	h := s.sameOrigin(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	for _, tc := range []struct {
		name   string
		method string
		hdr    map[string]string
		want   int
	}{
		{"get from another site", http.MethodGet, map[string]string{"Sec-Fetch-Site": "cross-site", "Origin": "http://evil.example"}, http.StatusNoContent},
		{"no browser headers", http.MethodPost, nil, http.StatusNoContent},
		{"same origin", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://admin.test"}, http.StatusNoContent},
		{"typed by the user", http.MethodPost, map[string]string{"Sec-Fetch-Site": "none"}, http.StatusNoContent},
		{"origin of the host", http.MethodPost, map[string]string{"Origin": "http://admin.test"}, http.StatusNoContent},
		{"referer of the host", http.MethodPost, map[string]string{"Referer": "http://admin.test/admin/outbox"}, http.StatusNoContent},
		{"same site is not same origin", http.MethodPost, map[string]string{"Sec-Fetch-Site": "same-site"}, http.StatusForbidden},
		{"cross site", http.MethodDelete, map[string]string{"Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"origin of another host", http.MethodPost, map[string]string{"Origin": "http://evil.example"}, http.StatusForbidden},
		{"referer of another host", http.MethodPost, map[string]string{"Referer": "http://evil.example/page"}, http.StatusForbidden},
		{"unparsable referer", http.MethodPost, map[string]string{"Referer": "http://[::1"}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := httptest.NewRequest(tc.method, "http://admin.test/admin/outbox/reset", nil)
			for k, v := range tc.hdr {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			require.Equal(t, tc.want, w.Code, w.Body.String())
		})
	}
}
