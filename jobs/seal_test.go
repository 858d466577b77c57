package jobs_test

import (
	"fmt"
	"testing"

	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/seal"
)

func sealKey(*testing.T) string { return seal.GenerateKey() }

// TestInserter_Seals: with keys, every insert path of an Inserter, COPY
// included, seals the job so that a verifier with the keys passes it;
// without keys none does.
func TestInserter_Seals(t *testing.T) {
	pool := pgtest.Pool(t)
	key := sealKey(t)
	keys, err := seal.ParseKeys(key)
	require.NoError(t, err)
	v, err := seal.NewVerifier(seal.VerifierConfig{Keys: keys})
	require.NoError(t, err)
	queue := fmt.Sprintf("seal_ins_%d", queueSeq.Add(1))
	opts := &river.InsertOpts{Queue: queue}
	args := jobs.NoopArgs{}

	// insertAll inserts one job by each path of ins and returns their ids.
	insertAll := func(t *testing.T, ins *jobs.Inserter) []int64 {
		t.Helper()
		ctx := t.Context()
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		res, err := ins.InsertTx(ctx, tx, args, opts)
		require.NoError(t, err)
		ids := []int64{res.Job.ID}
		many, err := ins.Client().InsertManyTx(ctx, tx, []river.InsertManyParams{{Args: args, InsertOpts: opts}})
		require.NoError(t, err)
		ids = append(ids, many[0].Job.ID)
		n, err := ins.Client().InsertManyFastTx(ctx, tx, []river.InsertManyParams{{Args: args, InsertOpts: opts}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		var copied int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT max(id) FROM river_job WHERE queue = $1`, queue).Scan(&copied))
		ids = append(ids, copied)
		uniq, err := ins.InsertTx(ctx, tx, args, jobs.WithUniqueKey(opts, fmt.Sprint("k", queueSeq.Add(1))))
		require.NoError(t, err)
		ids = append(ids, uniq.Job.ID)
		require.NoError(t, tx.Commit(ctx))
		return ids
	}
	check := func(t *testing.T, ids []int64, want *seal.Reason) {
		t.Helper()
		ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
		require.NoError(t, err)
		for _, id := range ids {
			job, err := ins.Client().JobGet(t.Context(), id)
			require.NoError(t, err)
			refusal := v.Check(job)
			if want == nil {
				require.Nil(t, refusal, "job %d", id)
			} else {
				require.NotNil(t, refusal, "job %d", id)
				require.Equal(t, *want, refusal.Reason)
			}
		}
	}

	t.Run("WithSealKeys", func(t *testing.T) {
		ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(keys))
		require.NoError(t, err)
		check(t, insertAll(t, ins), nil)
	})

	t.Run("FromEnvironment", func(t *testing.T) {
		t.Setenv(seal.EnvKeys, key)
		ins, err := jobs.NewInserter(pool)
		require.NoError(t, err)
		check(t, insertAll(t, ins), nil)
	})

	t.Run("EncryptFromEnvironment", func(t *testing.T) {
		t.Setenv(seal.EnvKeys, key)
		t.Setenv(seal.EnvEncrypt, "true")
		ins, err := jobs.NewInserter(pool)
		require.NoError(t, err)
		ids := insertAll(t, ins)
		for _, id := range ids {
			var args string
			require.NoError(t, pool.QueryRow(t.Context(), `SELECT args::text FROM river_job WHERE id = $1`, id).Scan(&args))
			require.Contains(t, args, seal.EnvelopeKey, "job %d", id)
		}
		check(t, ids, nil)
	})

	t.Run("BadEncrypt", func(t *testing.T) {
		t.Setenv(seal.EnvKeys, key)
		t.Setenv(seal.EnvEncrypt, "maybe")
		_, err := jobs.NewInserter(pool)
		require.ErrorContains(t, err, `FERRY_SEAL_ENCRYPT="maybe": not true or false`)
		t.Setenv(seal.EnvKeys, "")
		t.Setenv(seal.EnvEncrypt, "true")
		_, err = jobs.NewInserter(pool)
		require.ErrorContains(t, err, "FERRY_SEAL_ENCRYPT=true needs FERRY_SEAL_KEYS")
	})

	t.Run("NoKeys", func(t *testing.T) {
		t.Setenv(seal.EnvKeys, "")
		ins, err := jobs.NewInserter(pool)
		require.NoError(t, err)
		missing := seal.ReasonMissing
		check(t, insertAll(t, ins), &missing)
	})

	t.Run("BadEnvironment", func(t *testing.T) {
		t.Setenv(seal.EnvKeys, "c2hvcnQ=")
		_, err := jobs.NewInserter(pool)
		require.ErrorContains(t, err, "FERRY_SEAL_KEYS: key 1 of 1 decodes to 5 bytes")
		require.NotContains(t, err.Error(), "c2hvcnQ")
	})
}
