// Package pgtest starts private PostgreSQL clusters for tests and local runs,
// and hands each test a schema of its own with the migrations it names
// applied (NewWith).
//
// With nothing set, the first caller in the repository starts one shared
// cluster under .local/pg at the repository root (initdb on a free port, pg_cron
// preloaded and able to run its jobs), and every test package of the same run
// reuses it; `make test` stops it at the end, `make db-stop` does by hand.
// With TEST_DATABASE_URL or DATABASE_URL set, that database is used instead.
//
// When the server binaries or pg_cron are missing, they are installed
// through apt (postgresql-15, postgresql-15-cron) when running as root;
// otherwise the error names the packages to install.
package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Packages are the Debian packages that provide the server and pg_cron.
var Packages = []string{"postgresql-15", "postgresql-15-cron"}

// Options configures a new cluster.
type Options struct {
	// Dir is the data directory. Required; created when missing.
	Dir string
	// Port is the TCP port on 127.0.0.1. Defaults to a free port.
	Port int
	// Database is created after initdb. Defaults to "ichido".
	Database string
	// Settings are extra postgresql.conf lines (name → value, quoted as
	// needed by the caller). They override the defaults below.
	Settings map[string]string
	// HBA replaces the default pg_hba.conf lines (trust on loopback).
	HBA []string
	// Files are written into the data directory before the first start
	// (name → content), for example TLS certificates. Written with mode 0600.
	Files map[string][]byte
	// NoCron leaves pg_cron out of shared_preload_libraries.
	NoCron bool
	// SkipInit starts an existing data directory as it is (for example one
	// made by pg_basebackup).
	SkipInit bool
	// Bin is the directory of the server programs (initdb, pg_ctl,
	// postgres) to use instead of Debian's PostgreSQL 15, for example
	// InstallPG16's. pg_cron is then not checked for.
	Bin string
	// Env is added to the environment of the server programs, for example
	// the LD_LIBRARY_PATH that InstallPG16 returns.
	Env []string
}

// Cluster is a running private PostgreSQL server.
type Cluster struct {
	// Dir is the data directory.
	Dir string
	// Port is the TCP port on 127.0.0.1.
	Port int
	// Database is the database created for the project.
	Database string
	bin      string
	env      []string
}

// URL returns a connection URL for the superuser "postgres" on database db
// (the cluster's own database when db is empty), TLS off.
func (c *Cluster) URL(db string) string {
	if db == "" {
		db = c.Database
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.Port, db)
}

// Bin returns the path of a server program such as "pg_basebackup".
func (c *Cluster) Bin(name string) string { return filepath.Join(c.bin, name) }

// StartCluster creates (initdb) and starts a cluster as opts describe.
func StartCluster(ctx context.Context, opts Options) (*Cluster, error) {
	bin, err := opts.Bin, error(nil)
	if bin == "" {
		if bin, err = EnsureInstalled(ctx); err != nil {
			return nil, err
		}
	}
	if opts.Dir == "" {
		return nil, errors.New("pgtest: Options.Dir is required")
	}
	if opts.Database == "" {
		opts.Database = "ichido"
	}
	if opts.Port == 0 {
		if opts.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{Dir: opts.Dir, Port: opts.Port, Database: opts.Database, bin: bin, env: opts.Env}
	if !opts.SkipInit {
		if err := c.initdb(ctx, opts); err != nil {
			return nil, err
		}
	} else {
		if err := writeConf(c.Dir, "ichido.conf", c.conf(opts)); err != nil {
			return nil, err
		}
	}
	if err := c.Start(ctx); err != nil {
		return nil, err
	}
	if !opts.SkipInit {
		if err := c.psql(ctx, "postgres", "CREATE DATABASE "+quoteIdent(opts.Database)); err != nil {
			_ = c.Stop(context.Background(), "fast")
			return nil, err
		}
	}
	return c, nil
}

// OpenCluster returns a handle on an existing data directory without
// starting it.
func OpenCluster(ctx context.Context, dir string, port int, database string) (*Cluster, error) {
	bin, err := EnsureInstalled(ctx)
	if err != nil {
		return nil, err
	}
	return &Cluster{Dir: dir, Port: port, Database: database, bin: bin}, nil
}

func (c *Cluster) conf(opts Options) string {
	settings := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(c.Port),
		"unix_socket_directories": "''",
		"max_connections":         "300",
		"max_worker_processes":    "32",
		"log_min_messages":        "warning",
		"logging_collector":       "off",
	}
	if !opts.NoCron {
		settings["shared_preload_libraries"] = "'pg_cron'"
		settings["cron.database_name"] = "'" + opts.Database + "'"
		// Jobs run in background workers, so pg_cron needs no password or
		// pg_hba rule to reach its own database.
		settings["cron.use_background_workers"] = "on"
		settings["cron.max_running_jobs"] = "8"
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("# Written by pgtest: a private cluster for tests and local runs.\n")
	for _, k := range keys {
		fmt.Fprintf(&b, "%s = %s\n", k, settings[k])
	}
	return b.String()
}

func (c *Cluster) initdb(ctx context.Context, opts Options) error {
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	openTempAncestors(c.Dir)
	if err := chownToServer(c.Dir); err != nil {
		return err
	}
	if out, err := c.run(ctx, c.Bin("initdb"), "-D", c.Dir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"); err != nil {
		return fmt.Errorf("pgtest: initdb in %s: %v\n%s", c.Dir, err, out)
	}
	hba := opts.HBA
	if hba == nil {
		hba = []string{"host all all 127.0.0.1/32 trust", "host replication all 127.0.0.1/32 trust"}
	}
	files := map[string][]byte{"pg_hba.conf": []byte(strings.Join(hba, "\n") + "\n")}
	for name, content := range opts.Files {
		files[name] = content
	}
	for name, content := range files {
		p := filepath.Join(c.Dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		if err := chownToServer(p); err != nil {
			return err
		}
	}
	if err := writeConf(c.Dir, "ichido.conf", c.conf(opts)); err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer f.Close()
	_, err = f.WriteString("\ninclude 'ichido.conf'\n")
	return err
}

func writeConf(dir, name, content string) error {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return chownToServer(p)
}

// Start starts the server and waits until it accepts connections.
func (c *Cluster) Start(ctx context.Context) error {
	logFile := filepath.Join(c.Dir, "server.log")
	out, err := c.run(ctx, c.Bin("pg_ctl"), "-D", c.Dir, "-l", logFile, "-w", "-t", "60", "-o", "-p "+strconv.Itoa(c.Port), "start")
	if err != nil {
		tail, _ := os.ReadFile(logFile)
		if len(tail) > 2000 {
			tail = tail[len(tail)-2000:]
		}
		return fmt.Errorf("pgtest: starting PostgreSQL in %s: %v\n%s\n%s", c.Dir, err, out, tail)
	}
	return nil
}

// Stop stops the server; mode is "smart", "fast" or "immediate" (a crash).
func (c *Cluster) Stop(ctx context.Context, mode string) error {
	if out, err := c.run(ctx, c.Bin("pg_ctl"), "-D", c.Dir, "-w", "-t", "60", "-m", mode, "stop"); err != nil {
		return fmt.Errorf("pgtest: stopping PostgreSQL in %s: %v\n%s", c.Dir, err, out)
	}
	return nil
}

// Running reports whether the server of the data directory is up.
func (c *Cluster) Running(ctx context.Context) bool {
	_, err := c.run(ctx, c.Bin("pg_ctl"), "-D", c.Dir, "status")
	return err == nil
}

// Destroy stops the server (if running) and removes the data directory.
func (c *Cluster) Destroy() error {
	ctx := context.Background()
	if c.Running(ctx) {
		_ = c.Stop(ctx, "immediate")
	}
	return os.RemoveAll(c.Dir)
}

// Exec runs a command as the user that owns the cluster (postgres when the
// caller is root) and returns its combined output.
func (c *Cluster) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	return c.run(ctx, name, args...)
}

func (c *Cluster) psql(ctx context.Context, db, sql string) error {
	// sslmode=disable: the loopback connection needs no TLS, and libpq would
	// otherwise look for client certificates in the caller's home.
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=%s sslmode=disable", c.Port, db)
	out, err := c.run(ctx, "psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", conninfo, "-c", sql)
	if err != nil {
		return fmt.Errorf("pgtest: psql %q: %v\n%s", sql, err, out)
	}
	return nil
}

// run executes a command as the server's owner: PostgreSQL refuses to run as
// root, so a root caller runs it as the "postgres" user.
func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = os.TempDir()
	if len(c.env) > 0 && filepath.Dir(name) == c.bin {
		cmd.Env = append(os.Environ(), c.env...)
	}
	if cred, err := serverCredential(); err != nil {
		return nil, err
	} else if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	// pg_ctl's server inherits no pipe of ours: it writes to its log file.
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return buf.Bytes(), err
}

// serverCredential returns the postgres user's credential when running as
// root, nil otherwise.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root needs the 'postgres' user (install %s): %w", strings.Join(Packages, " "), err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

func chownToServer(path string) error {
	cred, err := serverCredential()
	if err != nil || cred == nil {
		return err
	}
	if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// openTempAncestors lets the server's user reach a data directory made by a
// root caller under the temporary directory (t.TempDir() makes its folders
// 0700): it adds search permission, and nothing else, to the folders between
// the temporary directory and the data directory. Elsewhere it changes
// nothing.
func openTempAncestors(dir string) {
	if os.Geteuid() != 0 {
		return
	}
	tmp := filepath.Clean(os.TempDir())
	for d := filepath.Dir(filepath.Clean(dir)); strings.HasPrefix(d, tmp+string(filepath.Separator)); d = filepath.Dir(d) {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&0o001 == 0 {
			_ = os.Chmod(d, fi.Mode().Perm()|0o011)
		}
	}
}

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtest: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }
