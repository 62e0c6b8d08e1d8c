package idempotency_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// TestReplayHookEditsDoNotStick: what an OnReplay hook changes in the
// Replay it is given (the stored response's headers included) reaches that
// one replay at most, never the local cache's entry, so later replays are
// unchanged; and hooks of concurrent replays from the cache never share a
// map (run with -race: concurrent map writes crash the process).
func TestReplayHookEditsDoNotStick(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	h, err := idempotency.Wrap(countingCreate(new(int)), quiet(idempotency.Config{
		Store: memstore.New(),
		Settings: idempotency.Settings{
			LocalCache: &idempotency.LocalCache{},
			OnReplay: func(_ context.Context, r *idempotency.Replay) {
				mu.Lock()
				seen = append(seen, r.Response.Headers["Content-Type"])
				mu.Unlock()
				r.Response.Headers["Content-Type"] = "text/edited"
				r.Response.Headers["X-Edited"] = "yes"
				r.Header.Set("X-Hook", "1")
			},
		},
	}))
	require.NoError(t, err)
	req := v2Post("/tasks", "auth0|x", map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}, `{}`)
	first, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "application/json", first.Headers["Content-Type"])

	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				replay, err := h(context.Background(), req)
				if !assertReplay(t, replay.Headers, err) {
					return
				}
			}
		}()
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, 400)
	for _, ct := range seen {
		require.Equal(t, "application/json", ct, "every hook sees the stored response, not an earlier hook's edit")
	}
}

func assertReplay(t *testing.T, headers map[string]string, err error) bool {
	t.Helper()
	return assertNoError(t, err) &&
		assertEqual(t, "application/json", headers["Content-Type"]) &&
		assertEqual(t, "", headers["X-Edited"]) &&
		assertEqual(t, "1", headers["X-Hook"])
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v", err)
		return false
	}
	return true
}

func assertEqual(t *testing.T, want, got string) bool {
	t.Helper()
	if want != got {
		t.Errorf("want %q, got %q", want, got)
		return false
	}
	return true
}
