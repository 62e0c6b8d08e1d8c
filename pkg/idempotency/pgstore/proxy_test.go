package pgstore_test

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
	"github.com/ichido/ichido/pkg/pgtest"
)

// TestThroughTransactionPooler runs the conformance suite through PgBouncer
// in transaction pooling mode, with few server connections shared by many
// clients, as RDS Proxy shares them: every statement may land on another
// server session, so nothing may rely on session state.
func TestThroughTransactionPooler(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("pgbouncer")
	require.NoError(t, err, "pgbouncer is needed: install it with 'apt-get install pgbouncer' (make deps)")
	db := pgtest.New(t)
	target, err := url.Parse(db.URL)
	require.NoError(t, err)
	port, err := pgtest.FreePort()
	require.NoError(t, err)

	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o755)) // readable by the postgres user when root drops to it
	conf := filepath.Join(dir, "pgbouncer.ini")
	require.NoError(t, os.WriteFile(conf, fmt.Appendf(nil, `[databases]
* = host=%s port=%s user=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 3
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
`, target.Hostname(), target.Port(), target.User.Username(), port), 0o644))

	args := []string{conf}
	if os.Geteuid() == 0 {
		args = []string{"-u", "postgres", conf} // PgBouncer refuses to run as root
	}
	cmd := exec.Command(bin, args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "pgbouncer did not start: %s", &logs)

	// PgBouncer does not pass search_path on, so the table is named with
	// its schema.
	proxied := fmt.Sprintf("postgres://%s@127.0.0.1:%d%s?sslmode=disable", target.User.Username(), port, target.Path)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			storetest.Run(t, func(t *testing.T) idempotency.Store {
				pool := newPool(t, proxied, func(c *pgxpool.Config) {
					c.ConnConfig.DefaultQueryExecMode = mode
					c.MaxConns = 8
				})
				return pgstore.New(pool, &pgstore.Options{Table: db.Schema + ".idempotency_keys"})
			})
		})
	}
}
