package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// printedSpan is what the test reads of a span that the stdout exporter
// printed.
type printedSpan struct {
	Name        string
	SpanContext struct{ TraceID, SpanID string }
	Links       []struct {
		SpanContext struct{ TraceID, SpanID string }
	}
	Attributes []printedAttr
	Resource   []printedAttr
}

type printedAttr struct {
	Key   string
	Value struct{ Value any }
}

// value is the value of key among attrs, or nil.
func value(attrs []printedAttr, key string) any {
	for _, a := range attrs {
		if a.Key == key {
			return a.Value.Value
		}
	}
	return nil
}

// printedSpans decodes the indented JSON spans among the other lines of
// the command's standard error (access log lines, log lines).
func printedSpans(t *testing.T, stderr string) []printedSpan {
	t.Helper()
	var spans []printedSpan
	for i := 0; i < len(stderr); {
		start := strings.Index(stderr[i:], "{\n")
		if start < 0 {
			break
		}
		start += i
		if start > 0 && stderr[start-1] != '\n' {
			i = start + 1
			continue
		}
		dec := json.NewDecoder(strings.NewReader(stderr[start:]))
		var s printedSpan
		require.NoError(t, dec.Decode(&s), stderr[start:])
		spans = append(spans, s)
		i = start + int(dec.InputOffset())
	}
	return spans
}

// TestTracesStdout: with ICHIDO_TRACES=stdout, a POST /tasks and its
// replay print two spans named "idempotency POST" on standard error, the
// replay's with a link to the span of the run whose answer it replays.
func TestTracesStdout(t *testing.T) {
	t.Parallel()
	srv := startServer(t, "ICHIDO_TRACES=stdout")
	alice := newClient(t, srv.base)
	key := uuid.NewString()
	created := alice.do("POST", "/tasks", key, `{"title":"See the spans"}`)
	require.Equal(t, 201, created.status, created.body)
	replayed := alice.do("POST", "/tasks", key, `{"title":"See the spans"}`)
	require.Equal(t, 201, replayed.status, replayed.body)
	require.Equal(t, "true", replayed.header.Get("Idempotent-Replayed"))
	require.Equal(t, created.body, replayed.body)
	require.NoError(t, srv.stop())

	spans := printedSpans(t, srv.accessLog.String())
	require.Len(t, spans, 2, srv.accessLog.String())
	first, replay := spans[0], spans[1]
	for _, s := range spans {
		require.Equal(t, "idempotency POST", s.Name)
		require.Equal(t, "http", value(s.Attributes, "ichido.shape"))
		require.Equal(t, "pgstore", value(s.Attributes, "ichido.store.name"))
		require.Equal(t, serviceName, value(s.Resource, "service.name"))
	}
	require.Equal(t, "completed", value(first.Attributes, "ichido.outcome"))
	require.Empty(t, first.Links)
	require.Equal(t, "replayed", value(replay.Attributes, "ichido.outcome"))
	require.NotEqual(t, first.SpanContext.SpanID, replay.SpanContext.SpanID)
	require.Len(t, replay.Links, 1)
	require.Equal(t, first.SpanContext, replay.Links[0].SpanContext, "the replay links to the run that produced its answer")

	// Nothing of the spans reaches standard output, where the ready line is.
	require.NotContains(t, srv.stdout.String(), "idempotency POST")
}

// TestTracesOff: without ICHIDO_TRACES nothing is printed; a value other
// than stdout or off is refused before anything starts, naming the
// variable.
func TestTracesOff(t *testing.T) {
	t.Parallel()
	obs, stop, err := traces(func(string) string { return "" }, io.Discard)
	require.NoError(t, err)
	require.Nil(t, obs)
	require.NoError(t, stop(context.Background()))
	obs, _, err = traces(func(string) string { return " Off " }, io.Discard)
	require.NoError(t, err)
	require.Nil(t, obs)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = run(ctx, []string{"-addr", "127.0.0.1:0"}, func(k string) string {
		if k == tracesVariable {
			return "otlp"
		}
		return ""
	}, io.Discard, io.Discard)
	require.ErrorContains(t, err, `ICHIDO_TRACES is "otlp"`)
	require.ErrorContains(t, err, "stdout")
}
