package logtest_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
)

func TestRecorder(t *testing.T) {
	t.Parallel()

	logs := &logtest.Recorder{}
	log := logs.Logger()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { log.Debug("worker: tick", "n", i) })
	}
	wg.Wait()
	log.Info("worker: stopped", "reason", "done")

	require.Len(t, logs.All("worker: tick"), 4, "every goroutine's record, debug level included")
	rec := logs.Find(t, "worker: stopped")
	require.Equal(t, "done", rec["reason"])
	require.Equal(t, "INFO", rec["level"])
	require.Empty(t, logs.All("worker: started"))
	require.Contains(t, logs.String(), `"msg":"worker: stopped"`)
}

func TestLogged(t *testing.T) {
	t.Parallel()

	line := `{"time":"2026-01-02T03:04:05Z","level":"INFO","msg":"job: completed","job_id":9007199254740993,"deferred":true,"kind":"ferry.noop"}`
	cases := map[string]struct {
		match func(string) bool
		line  string
		want  bool
	}{
		"Message":          {logtest.Logged("job: completed"), line, true},
		"OtherMessage":     {logtest.Logged("job: failed"), line, false},
		"Attrs":            {logtest.Logged("job: completed", "kind", "ferry.noop", "deferred", true), line, true},
		"LargeIntExact":    {logtest.Logged("job: completed", "job_id", int64(9007199254740993)), line, true},
		"OtherValue":       {logtest.Logged("job: completed", "job_id", int64(9007199254740992)), line, false},
		"MissingAttr":      {logtest.Logged("job: completed", "queue", "default"), line, false},
		"Level":            {logtest.Logged("job: completed", "level", "INFO"), line, true},
		"NotJSON":          {logtest.Logged("job: completed"), "job: completed", false},
		"TextHandlerStyle": {logtest.Logged("job: completed"), `time=2026-01-02T03:04:05Z level=INFO msg="job: completed"`, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, tc.match(tc.line))
		})
	}
}
