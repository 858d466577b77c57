package logtest_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/logtest"
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
