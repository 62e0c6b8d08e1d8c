package grpcidem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/grpcidem"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// lockedBuffer is a log destination that the server's goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// lines returns the JSON log lines written so far.
func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.buf.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// TestReadMethodWithoutKeySaysWhatToDo: a protected read method called
// without a key is refused with a message that names the method and the two
// ways to leave it out, and every log line names the call's method.
func TestReadMethodWithoutKeySaysWhatToDo(t *testing.T) {
	t.Parallel()
	logs := &lockedBuffer{}
	h := serve(t, grpcidem.Config{Store: memstore.New(), Settings: idempotency.Settings{
		Logger: slog.New(slog.NewJSONHandler(logs, nil)), Metrics: io.Discard,
	}}, nil)

	r := h.Call(getMethod, "alice", "a")
	storekit.RequireRefusal(t, adapter{}, r, codes.InvalidArgument, idempotency.CodeKeyMissing, false)
	msg := status.Convert(r.Err).Message()
	require.Contains(t, msg, getMethod)
	require.Contains(t, msg, "Config.Methods")
	require.Contains(t, msg, "NO_SIDE_EFFECTS")

	require.NoError(t, h.Call(storekit.CreateMethod, "alice", "a", uuid.NewString()).Err)

	lines := logs.lines(t)
	require.Len(t, lines, 2)
	require.Equal(t, "rejected", lines[0]["outcome"])
	require.Equal(t, "ichido.test.Tasks/Get", lines[0]["method"])
	require.Equal(t, "completed", lines[1]["outcome"])
	require.Equal(t, "ichido.test.Tasks/Create", lines[1]["method"])
	require.Equal(t, grpcidem.Name, lines[1]["function"])
}

// TestRequireTenant: with Settings.RequireTenant, a call whose tenant is
// empty is refused as unauthenticated and its handler does not run.
func TestRequireTenant(t *testing.T) {
	t.Parallel()
	tenant := ""
	h := serve(t, grpcidem.Config{Store: memstore.New(), Settings: idempotency.Settings{
		RequireTenant: true,
		Tenant:        func(context.Context) string { return tenant },
		Logger:        storekit.Quiet().Logger, Metrics: io.Discard,
	}}, nil)
	r := h.Call(storekit.CreateMethod, "alice", "a", uuid.NewString())
	storekit.RequireRefusal(t, adapter{}, r, codes.Unauthenticated, idempotency.CodeUnauthenticated, false)
	require.Contains(t, status.Convert(r.Err).Message(), "tenant")
	require.Zero(t, h.svc.runs.Load())
}
