package jobs_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// Kinds of the user's own, as an application would define them.
type (
	reportArgs  struct{}
	alertArgs   struct{}
	archiveArgs struct{}
)

func (reportArgs) Kind() string  { return "test.report" }
func (alertArgs) Kind() string   { return "test.alert" }
func (archiveArgs) Kind() string { return "test.archive" }

type nopWorker[T river.JobArgs] struct{ river.WorkerDefaults[T] }

func (nopWorker[T]) Work(context.Context, *river.Job[T]) error { return nil }

func TestRegistry_Add(t *testing.T) {
	t.Parallel()

	t.Run("Builtin", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.NoError(t, r.Add(jobs.Builtin()...))
		var names []string
		for _, k := range r.Kinds() {
			names = append(names, k.Name)
			require.Equal(t, river.QueueDefault, k.Queue)
			require.NotEmpty(t, k.Description)
		}
		require.Equal(t, []string{"ferry.noop", "http.request"}, names)

		k, ok := r.Get("http.request")
		require.True(t, ok)
		require.Equal(t, "http.request", k.Name)
		_, ok = r.Get("nope")
		require.False(t, ok)
	})

	t.Run("DefineDefaultsQueue", func(t *testing.T) {
		t.Parallel()
		k := jobs.Define[reportArgs](&nopWorker[reportArgs]{}, "", "monthly report")
		require.Equal(t, "test.report", k.Name)
		require.Equal(t, river.QueueDefault, k.Queue)
		require.Equal(t, "monthly report", k.Description)
	})

	t.Run("DuplicateAcrossCalls", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.NoError(t, r.Add(jobs.Builtin()...))
		err := r.Add(jobs.Define[jobs.NoopArgs](&jobs.NoopWorker{}, "other", "again"))
		require.ErrorContains(t, err, `kind "ferry.noop" registered twice`)
		require.Len(t, r.Kinds(), 2)
	})

	t.Run("DuplicateInOneCall", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		k := jobs.Define[reportArgs](&nopWorker[reportArgs]{}, "reports", "")
		require.ErrorContains(t, r.Add(k, k), `kind "test.report" registered twice`)
	})

	t.Run("NotMadeWithDefine", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.ErrorContains(t, r.Add(jobs.Kind{Name: "test.handmade", Queue: "default"}), `kind "test.handmade" was not made with jobs.Define`)
		require.ErrorContains(t, r.Add(jobs.Kind{}), "was not made with jobs.Define")
		require.Empty(t, r.Kinds())
	})

	t.Run("KindsIsACopy", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.NoError(t, r.Add(jobs.Builtin()...))
		kinds := r.Kinds()
		kinds[0].Name = "changed"
		_, ok := r.Get("ferry.noop")
		require.True(t, ok)
	})
}

func TestRegistry_Queues(t *testing.T) {
	t.Parallel()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.Empty(t, r.Queues())
	})

	t.Run("DistinctSorted", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.NoError(t, r.Add(
			jobs.Define[reportArgs](&nopWorker[reportArgs]{}, "reports", ""),
			jobs.Define[alertArgs](&nopWorker[alertArgs]{}, "", ""),
			jobs.Define[archiveArgs](&nopWorker[archiveArgs]{}, "archive", ""),
		))
		require.NoError(t, r.Add(jobs.Builtin()...))
		require.Equal(t, []string{"archive", river.QueueDefault, "reports"}, r.Queues())
	})
}

func TestRegistry_Workers(t *testing.T) {
	t.Parallel()

	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		w, err := r.Workers()
		require.NoError(t, err)
		require.NotNil(t, w)
	})

	t.Run("WorksTheKinds", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.NoError(t, r.Add(jobs.Builtin()...))
		require.NoError(t, r.Add(jobs.Define[reportArgs](&nopWorker[reportArgs]{}, "reports", "")))
		workers, err := r.Workers()
		require.NoError(t, err)

		client := startClient(t, pgtest.Pool(t), workers)
		for _, args := range []river.JobArgs{jobs.NoopArgs{}, reportArgs{}} {
			ev, job := client.run(t, args)
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%s", args.Kind())
			require.Equal(t, rivertype.JobStateCompleted, job.State)
		}
	})
}

func TestRegistry_Publish(t *testing.T) {
	t.Parallel()

	type testBundle struct{ tx pgx.Tx }

	// setup gives each test a transaction rolled back at its end, so rows
	// published here are never seen by another test.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		tx, err := pgtest.Pool(t).Begin(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return &testBundle{tx: tx}
	}

	type row struct{ kind, queue, description string }
	rows := func(t *testing.T, tx pgx.Tx) []row {
		t.Helper()
		rs, err := tx.Query(t.Context(), "SELECT kind, queue, description FROM ferry_job_kind ORDER BY kind")
		require.NoError(t, err)
		var out []row
		for rs.Next() {
			var r row
			require.NoError(t, rs.Scan(&r.kind, &r.queue, &r.description))
			out = append(out, r)
		}
		require.NoError(t, rs.Err())
		return out
	}

	t.Run("EmptyDoesNothing", func(t *testing.T) {
		t.Parallel()
		var r jobs.Registry
		require.NoError(t, r.Publish(t.Context(), nil))
	})

	t.Run("Upserts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// Kinds no other test publishes, so that concurrent transactions
		// never wait on each other's rows.
		var r jobs.Registry
		require.NoError(t, r.Add(
			jobs.Define[reportArgs](&nopWorker[reportArgs]{}, "reports", "monthly report"),
			jobs.Define[archiveArgs](&nopWorker[archiveArgs]{}, "", "archive old rows"),
		))
		require.NoError(t, r.Publish(t.Context(), b.tx))
		require.NoError(t, r.Publish(t.Context(), b.tx), "publishing twice is fine")

		got := rows(t, b.tx)
		require.Equal(t, []row{
			{"test.archive", river.QueueDefault, "archive old rows"},
			{"test.report", "reports", "monthly report"},
		}, got)

		// A later worker with a new version of the kind updates it.
		var r2 jobs.Registry
		require.NoError(t, r2.Add(jobs.Define[reportArgs](&nopWorker[reportArgs]{}, "reports_v2", "weekly report")))
		require.NoError(t, r2.Publish(t.Context(), b.tx))
		got = rows(t, b.tx)
		require.Equal(t, []row{
			{"test.archive", river.QueueDefault, "archive old rows"},
			{"test.report", "reports_v2", "weekly report"},
		}, got)
	})

	t.Run("ErrorSaysWhat", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.tx.Rollback(t.Context()))
		var r jobs.Registry
		require.NoError(t, r.Add(jobs.Builtin()...))
		require.ErrorContains(t, r.Publish(t.Context(), b.tx), "jobs: publish kinds to ferry_job_kind")
	})
}

func TestLookup(t *testing.T) {
	t.Parallel()

	type testBundle struct{ tx pgx.Tx }

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		tx, err := pgtest.Pool(t).Begin(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		return &testBundle{tx: tx}
	}

	t.Run("BuiltinWithoutDatabase", func(t *testing.T) {
		t.Parallel()
		// A nil DBTX: a built-in kind is found without any query.
		for _, kind := range jobs.Builtin() {
			k, ok, err := jobs.Lookup(t.Context(), nil, kind.Name)
			require.NoError(t, err)
			require.True(t, ok)
			require.Equal(t, jobs.Known{Name: kind.Name, Queue: kind.Queue, Description: kind.Description, Builtin: true}, k)
		}
	})

	t.Run("BuiltinWinsOverTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.tx.Exec(t.Context(), "INSERT INTO ferry_job_kind (kind, queue, description) VALUES ('http.request', 'elsewhere', 'shadow')")
		require.NoError(t, err)
		k, ok, err := jobs.Lookup(t.Context(), b.tx, "http.request")
		require.NoError(t, err)
		require.True(t, ok)
		require.True(t, k.Builtin)
		require.Equal(t, river.QueueDefault, k.Queue)
	})

	t.Run("Published", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var r jobs.Registry
		require.NoError(t, r.Add(jobs.Define[alertArgs](&nopWorker[alertArgs]{}, "alerts", "page the on-call")))
		require.NoError(t, r.Publish(t.Context(), b.tx))

		k, ok, err := jobs.Lookup(t.Context(), b.tx, "test.alert")
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, jobs.Known{Name: "test.alert", Queue: "alerts", Description: "page the on-call"}, k)
	})

	t.Run("Unknown", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		k, ok, err := jobs.Lookup(t.Context(), b.tx, "test.nobody")
		require.NoError(t, err)
		require.False(t, ok)
		require.Zero(t, k)
	})

	t.Run("ErrorSaysWhat", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NoError(t, b.tx.Rollback(t.Context()))
		_, ok, err := jobs.Lookup(t.Context(), b.tx, "test.report")
		require.ErrorContains(t, err, `jobs: look up kind "test.report"`)
		require.False(t, ok)
	})
}
