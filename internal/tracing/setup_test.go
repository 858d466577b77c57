package tracing

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSetup reads the OTEL_* variables as the specification does.
func TestSetup(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		t.Setenv(k, "")
	}
	ctx := context.Background()
	setup := func(env map[string]string) (bool, string, error) {
		t.Helper()
		for k, v := range env {
			t.Setenv(k, v)
		}
		var logs, stdout bytes.Buffer
		tp, shutdown, err := Setup(ctx, "test", &stdout, slog.New(slog.NewJSONHandler(&logs, nil)))
		if err == nil {
			require.NoError(t, shutdown(ctx))
		}
		for k := range env {
			t.Setenv(k, "")
		}
		return tp != nil, logs.String(), err
	}

	on, logs, err := setup(nil)
	require.NoError(t, err)
	require.False(t, on, "no variable: off")
	require.Empty(t, logs)

	on, logs, err = setup(map[string]string{"OTEL_TRACES_EXPORTER": "console"})
	require.NoError(t, err)
	require.True(t, on)
	require.Contains(t, logs, `"msg":"tracing: on","exporter":"console"`)

	on, logs, err = setup(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer s3cret"})
	require.NoError(t, err)
	require.True(t, on, "an OTLP endpoint alone turns it on")
	require.Contains(t, logs, `"exporter":"otlp","protocol":"http/protobuf"`)
	require.NotContains(t, logs, "s3cret")

	on, _, err = setup(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
	require.NoError(t, err)
	require.True(t, on)

	for env, want := range map[string]map[string]string{
		"none":     {"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"},
		"disabled": {"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "console"},
	} {
		on, _, err = setup(want)
		require.NoError(t, err, env)
		require.False(t, on, env)
	}

	for want, env := range map[string]map[string]string{
		`OTEL_TRACES_EXPORTER "jaeger": want otlp, console or none`:           {"OTEL_TRACES_EXPORTER": "jaeger"},
		`OTEL_TRACES_EXPORTER "otlp,console"`:                                 {"OTEL_TRACES_EXPORTER": "otlp,console"},
		`OTEL_EXPORTER_OTLP_PROTOCOL "http/json": want http/protobuf or grpc`: {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
	} {
		_, _, err = setup(env)
		require.Error(t, err)
		require.Contains(t, err.Error(), want)
		require.False(t, strings.Contains(err.Error(), "\n"), "one line")
	}
}
