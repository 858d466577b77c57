package tracing

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Setup returns the tracer provider that the standard OpenTelemetry
// environment variables describe, and its shutdown (which flushes the spans
// not yet exported), or nil and a no-op when they turn tracing off. The
// variables read:
//
//   - OTEL_SDK_DISABLED=true: off.
//   - OTEL_TRACES_EXPORTER: otlp, console (spans as JSON lines on stdout)
//     or none. Unset: otlp when OTEL_EXPORTER_OTLP_ENDPOINT or
//     OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, else off. So a worker
//     with no OTEL_* variable traces nothing.
//   - OTEL_EXPORTER_OTLP_(TRACES_)PROTOCOL: http/protobuf (the default) or
//     grpc; the exporters read their own OTEL_EXPORTER_OTLP_* variables
//     (endpoint, headers, timeout, certificates, compression).
//   - OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the SDK's default:
//     parentbased_always_on), OTEL_BSP_* (the batch span processor),
//     OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (service.name defaults
//     to "ferry").
//
// A value it does not know is an error naming the variable; no value of
// theirs is ever logged (OTEL_EXPORTER_OTLP_HEADERS holds credentials).
// Setup also makes the provider the global one, and W3C trace context and
// baggage the global propagator, for the instrumentation of a job's own
// code (an embedder's, through ferrycli.WorkerMain).
func Setup(ctx context.Context, version string, stdout io.Writer, log *slog.Logger) (trace.TracerProvider, func(context.Context) error, error) {
	off := func(context.Context) error { return nil }
	if strings.EqualFold(strings.TrimSpace(os.Getenv("OTEL_SDK_DISABLED")), "true") {
		return nil, off, nil
	}
	exporter := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER"))
	if exporter == "" && (os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "") {
		exporter = "otlp"
	}
	var (
		exp      sdktrace.SpanExporter
		err      error
		protocol string
	)
	switch exporter {
	case "", "none":
		return nil, off, nil
	case "otlp":
		protocol = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
		if protocol == "" {
			protocol = strings.TrimSpace(os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
		}
		switch protocol {
		case "", "http/protobuf":
			protocol = "http/protobuf"
			exp, err = otlptracehttp.New(ctx)
		case "grpc":
			exp, err = otlptracegrpc.New(ctx)
		default:
			return nil, off, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: want http/protobuf or grpc", protocol)
		}
	case "console":
		exp, err = stdouttrace.New(stdouttrace.WithWriter(stdout))
	default:
		return nil, off, fmt.Errorf("OTEL_TRACES_EXPORTER %q: want otlp, console or none (one exporter)", exporter)
	}
	if err != nil {
		return nil, off, fmt.Errorf("tracing: %s exporter: %w", exporter, err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("ferry"), semconv.ServiceVersion(version)),
		resource.WithFromEnv(),
		resource.WithTelemetrySDK(),
	)
	if err != nil {
		return nil, off, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	// Global too: the spans a job's own code makes with otel.Tracer (its
	// HTTP client's, its database driver's) are children of the job's.
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	attrs := []any{"exporter", exporter}
	if protocol != "" {
		attrs = append(attrs, "protocol", protocol)
	}
	log.Info("tracing: on", attrs...)
	return tp, tp.Shutdown, nil
}
