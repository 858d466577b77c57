package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ferryq/ferry"
)

// otelResult is what tracing costs a worker: the best rate of ferry's
// worker stack on the same backlog without and with traces (every job
// sampled, its span exported over OTLP/HTTP to a collector on loopback that
// reads and drops each request), and the median of the rounds' ratios.
type otelResult struct {
	Off    float64 `json:"otel_off_jobs_per_sec"`
	On     float64 `json:"otel_on_jobs_per_sec"`
	Ratio  float64 `json:"otel_worker_ratio"`
	Spans  int64   `json:"otel_spans_exported"`
	Rounds int     `json:"otel_rounds"`
	// RoundRatios is each paired round's ratio, Ratio their median.
	RoundRatios []float64 `json:"otel_worker_ratio_rounds"`
}

// otelThroughput works a backlog of n no-op jobs rounds times each way,
// taking turns, as sealedThroughput does.
func otelThroughput(ctx context.Context, serverURL string, n, rounds int) (otelResult, error) {
	var bytes atomic.Int64
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.Copy(io.Discard, r.Body)
		bytes.Add(b)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer collector.Close()

	var exported atomic.Int64
	traced := func() (float64, error) {
		exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(collector.URL+"/v1/traces"))
		if err != nil {
			return 0, err
		}
		counted := &countingExporter{SpanExporter: exp, n: &exported}
		// A queue that holds the whole backlog's spans: the SDK drops the
		// spans a full queue cannot take, which would hide the cost.
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithBatcher(counted, sdktrace.WithMaxQueueSize(max(n, 2048)), sdktrace.WithMaxExportBatchSize(2048)))
		defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
		return ferryThroughput(ctx, serverURL, n, nil, false, func(c *ferry.Config) { c.TracerProvider = tp })
	}
	r := otelResult{Rounds: rounds}
	p, err := pairedRounds(rounds,
		func() (float64, error) { return ferryThroughput(ctx, serverURL, n, nil, false) },
		traced)
	if err != nil {
		return r, err
	}
	r.Off, r.On, r.Ratio, r.RoundRatios = p.Base, p.Other, p.Ratio(), p.Ratios
	r.Spans = exported.Load()
	// Fails closed: a run whose spans never reached the collector measured
	// nothing of tracing's cost.
	if want := int64(n) * int64(rounds); r.Spans < want || bytes.Load() == 0 {
		return r, fmt.Errorf("otel: %d spans exported (%d bytes) for %d traced jobs", r.Spans, bytes.Load(), want)
	}
	return r, nil
}

// countingExporter counts the spans its exporter took.
type countingExporter struct {
	sdktrace.SpanExporter
	n *atomic.Int64
}

func (c *countingExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := c.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		c.n.Add(int64(len(spans)))
	}
	return err
}
