package idempotency_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// server is one drainserver process and the JSON lines it writes.
type server struct {
	cmd   *exec.Cmd
	addr  string
	lines chan map[string]any
}

// startServer runs the built drainserver with env added to the test's
// environment, and waits for its address.
func startServer(t *testing.T, bin string, env ...string) *server {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	s := &server{cmd: cmd, lines: make(chan map[string]any, 100)}
	go func() {
		defer close(s.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) != nil {
				m = map[string]any{"msg": "not JSON", "line": sc.Text()}
			}
			s.lines <- m
		}
	}()
	line := s.next(t, "listening")
	s.addr = line["addr"].(string)
	return s
}

// next returns the next line whose msg is msg, failing on the end of the
// output or on a line that is not JSON.
func (s *server) next(t *testing.T, msg string) map[string]any {
	t.Helper()
	for m := range s.lines {
		require.NotEqual(t, "not JSON", m["msg"], "every line is JSON: %v", m["line"])
		if m["msg"] == msg {
			return m
		}
	}
	t.Fatalf("the server ended without a %q line", msg)
	return nil
}

func (s *server) post(key string) (*http.Response, string, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/orders", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		return nil, "", err
	}
	req.Header.Set("X-User", "alice")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, string(body), err
}

// TestSIGTERMReleasesACutOffRun: a real server process gets SIGTERM while
// a protected run is in flight. Its Drain cancels the run at the end of the
// grace period and the record is released, so that the client's retry on a
// second process runs at once: 201, not 409 for the rest of the lease.
func TestSIGTERMReleasesACutOffRun(t *testing.T) {
	t.Parallel()
	db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pgstore.Migrate(ctx, pool, nil)
		return err
	})
	bin := filepath.Join(t.TempDir(), "drainserver")
	build := exec.Command("go", "build", "-o", bin, "./drainserver")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	require.NoError(t, build.Run(), "building drainserver")
	env := []string{"DB_AUTH=url", "DATABASE_URL=" + db.URL, "GRACE=100ms"}

	first := startServer(t, bin, append(env, "BLOCK=1")...)
	key := uuid.NewString()
	type answer struct {
		status int
		err    error
	}
	cut := make(chan answer, 1)
	go func() {
		resp, _, err := first.post(key)
		if err != nil {
			cut <- answer{err: err}
			return
		}
		cut <- answer{status: resp.StatusCode}
	}()
	first.next(t, "work started")

	// Without the drain, this record would answer 409 until its lease ran
	// out (Settings.Heartbeat, 30 seconds).
	store := must.Value(pgstore.New(db.Pool, nil))
	userID, recordKey, err := idempotency.HTTPRecordID("", idempotency.KeyUUIDv4, "alice", key)
	require.NoError(t, err)
	rec, found, err := store.Get(context.Background(), userID, recordKey)
	require.NoError(t, err)
	require.True(t, found, "the run holds its record")
	require.Equal(t, "in_progress", string(rec.Status))

	require.NoError(t, first.cmd.Process.Signal(syscall.SIGTERM))
	log := first.next(t, "idempotency")
	require.Equal(t, "released", log["outcome"], "the cut-off run's record was released: %v", log)
	stopped := first.next(t, "stopped")
	require.Contains(t, stopped["drain"], "1 runs were cut off")
	require.NoError(t, first.cmd.Wait())
	a := <-cut
	require.NoError(t, a.err)
	require.Equal(t, http.StatusServiceUnavailable, a.status, "the cut-off client is told to retry")

	_, found, err = store.Get(context.Background(), userID, recordKey)
	require.NoError(t, err)
	require.False(t, found, "no record is left in progress")

	second := startServer(t, bin, env...)
	resp, body, err := second.post(key)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode, "the retry runs at once on another process: %s", body)
	require.Contains(t, body, `"pid":`)
	require.Equal(t, "completed", second.next(t, "idempotency")["outcome"])
}
