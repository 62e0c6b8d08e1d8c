package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ichido/ichido/internal/testkit/capture"
)

// PgBouncerPackage is the Debian package that provides pgbouncer.
const PgBouncerPackage = "pgbouncer"

// PgBouncerOptions configures a private pgbouncer.
type PgBouncerOptions struct {
	// Host is the PostgreSQL server's address. Defaults to "127.0.0.1".
	Host string
	// Port is the PostgreSQL server's port. Required.
	Port int
	// Users are the user names clients may log in as. Authentication is
	// trust, but pgbouncer still wants every name in its auth file.
	// Defaults to ["postgres"].
	Users []string
	// Settings are extra [pgbouncer] lines (name → value) that override the
	// defaults: pool_mode transaction, default_pool_size 5,
	// max_client_conn 200, ignore_startup_parameters extra_float_digits.
	Settings map[string]string
}

// PgBouncer is a running private pgbouncer in front of one PostgreSQL
// server; every database name a client asks for is passed through to it.
type PgBouncer struct {
	// Port is the TCP port pgbouncer listens on, on 127.0.0.1.
	Port int
	// Dir holds its configuration and log; removed by Stop.
	Dir string

	cmd    *exec.Cmd
	output *capture.Buffer
	exited chan struct{}
	once   sync.Once
}

// URL returns a URL for user on database db through pgbouncer, TLS off.
func (b *PgBouncer) URL(user, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", url.PathEscape(user), b.Port, url.PathEscape(db))
}

// StartPgBouncer starts pgbouncer (installing it through apt when missing
// and running as root) in transaction pooling mode, on a free port, in
// front of the server opts names. As root it runs as the postgres user:
// pgbouncer refuses to run as root.
func StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (*PgBouncer, error) {
	if opts.Port == 0 {
		return nil, errors.New("pgtest: PgBouncerOptions.Port (the PostgreSQL server's port) is required")
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if len(opts.Users) == 0 {
		opts.Users = []string{"postgres"}
	}
	bin, err := pgbouncerBinary(ctx)
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := chownToServer(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}

	settings := map[string]string{
		"listen_addr":               "127.0.0.1",
		"listen_port":               strconv.Itoa(port),
		"unix_socket_dir":           "",
		"auth_type":                 "trust",
		"auth_file":                 filepath.Join(dir, "userlist.txt"),
		"pool_mode":                 "transaction",
		"default_pool_size":         "5",
		"max_client_conn":           "200",
		"ignore_startup_parameters": "extra_float_digits",
		"admin_users":               "postgres",
		"logfile":                   filepath.Join(dir, "pgbouncer.log"),
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var ini strings.Builder
	fmt.Fprintf(&ini, "; Written by pgtest: a private pgbouncer for tests.\n[databases]\n* = host=%s port=%d\n\n[pgbouncer]\n", opts.Host, opts.Port)
	for _, k := range keys {
		fmt.Fprintf(&ini, "%s = %s\n", k, settings[k])
	}
	var users strings.Builder
	for _, u := range opts.Users {
		fmt.Fprintf(&users, "%q \"\"\n", u)
	}
	for name, content := range map[string]string{"pgbouncer.ini": ini.String(), "userlist.txt": users.String()} {
		if err := writeConf(dir, name, content); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}

	b := &PgBouncer{Port: port, Dir: dir, output: &capture.Buffer{}, exited: make(chan struct{})}
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Dir = dir
	b.cmd.Stdout, b.cmd.Stderr = b.output, b.output
	if cred, err := serverCredential(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	} else {
		// Pdeathsig: a test binary that dies leaves no pgbouncer behind.
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	}
	if err := b.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: starting pgbouncer: %w", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()

	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// PgBouncerFor starts a private pgbouncer in front of the server of
// serverURL (for example SharedURL's) and stops it when the test ends.
func PgBouncerFor(t testing.TB, serverURL string, opts PgBouncerOptions) *PgBouncer {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatalf("pgtest: parsing the server URL: %v", err)
	}
	opts.Host = u.Hostname()
	if opts.Port, err = strconv.Atoi(u.Port()); err != nil {
		opts.Port = 5432
	}
	b, err := StartPgBouncer(context.Background(), opts)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = b.Stop() })
	return b
}

// Stop stops pgbouncer and removes its directory.
func (b *PgBouncer) Stop() error {
	var err error
	b.once.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGINT) // SIGINT: immediate shutdown
		select {
		case <-b.exited:
		case <-time.After(10 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
		err = os.RemoveAll(b.Dir)
	})
	return err
}

func (b *PgBouncer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port))
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		select {
		case <-b.exited:
			log, _ := os.ReadFile(filepath.Join(b.Dir, "pgbouncer.log"))
			return fmt.Errorf("pgtest: pgbouncer exited at start: %s\n%s\n%s", b.cmd.ProcessState, b.output.String(), log)
		case <-ctx.Done():
			return fmt.Errorf("pgtest: pgbouncer did not listen on %s: %w\n%s", addr, ctx.Err(), b.output.String())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// pgbouncerBinary finds pgbouncer, installing it through apt when missing
// and running as root.
func pgbouncerBinary(ctx context.Context) (string, error) {
	find := func() (string, bool) {
		if p, err := exec.LookPath("pgbouncer"); err == nil {
			return p, true
		}
		for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"} {
			if _, err := os.Stat(p); err == nil {
				return p, true
			}
		}
		return "", false
	}
	if p, ok := find(); ok {
		return p, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("pgtest: pgbouncer is needed: install it with 'sudo apt-get install %s'", PgBouncerPackage)
	}
	if err := AptInstall(ctx, PgBouncerPackage); err != nil {
		return "", err
	}
	if p, ok := find(); ok {
		return p, nil
	}
	return "", fmt.Errorf("pgtest: %s installed, but the pgbouncer program is still missing", PgBouncerPackage)
}
