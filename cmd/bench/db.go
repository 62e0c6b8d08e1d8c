package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
)

// privateSettings are the settings of the bench's own cluster. Durability
// is on, as on Aurora; shared_buffers is large enough for the key table's
// indexes at five million keys, as an Aurora writer's (about three quarters
// of its memory) would be.
var privateSettings = map[string]string{
	"fsync":              "on",
	"synchronous_commit": "on",
	"full_page_writes":   "on",
	"shared_buffers":     "'1GB'",
	"max_wal_size":       "'2GB'",
	// pg_stat_statements gives the server's planning and execution time
	// per statement (section hotpath); top-level statements only, whose
	// time includes that of the functions they call.
	"shared_preload_libraries":          "'pg_cron,pg_stat_statements'",
	"pg_stat_statements.track":          "top",
	"pg_stat_statements.track_planning": "on",
}

// loggedSuffix names the schema of the LOGGED copy of idempotency_keys that
// the durability section compares against: the migrations applied in a
// schema of its own (so that the copy has its own claim function), then the
// table switched to LOGGED.
const loggedSuffix = "_logged"

// database is the schema the bench works in.
type database struct {
	baseURL string
	url     string // with search_path set to schema
	schema  string
	where   string // "private cluster" or "DATABASE_URL"
	cluster *pgtest.Cluster
	pool    *pgxpool.Pool // for setup and the floor; MaxConns 40
}

func openDatabase(ctx context.Context, url string) (*database, error) {
	d := &database{baseURL: url, where: "DATABASE_URL"}
	if url == "" {
		dir, err := os.MkdirTemp("", "ichido-bench-pg-")
		if err != nil {
			return nil, err
		}
		c, err := pgtest.StartCluster(ctx, pgtest.Options{Dir: dir, Settings: privateSettings})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		d.cluster, d.baseURL, d.where = c, c.URL(""), "private cluster"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	d.schema = "bench_" + hex.EncodeToString(b[:])
	if err := d.setup(ctx); err != nil {
		d.close()
		return nil, err
	}
	return d, nil
}

func (d *database) setup(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, d.baseURL)
	if err != nil {
		return err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+d.schema); err != nil {
		return err
	}
	if d.url, err = pgtest.WithSearchPath(d.baseURL, d.schema); err != nil {
		return err
	}
	if d.pool, err = d.newPool(ctx, 40); err != nil {
		return err
	}
	if _, err := migrate.Up(ctx, d.pool); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	// The bench calls the purge itself; the hourly job must not run in the
	// middle of a measurement.
	if _, err := admin.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE '%-' || $1`, d.schema); err != nil {
		return fmt.Errorf("unscheduling the purge jobs: %w", err)
	}
	return d.setupLogged(ctx, admin)
}

// loggedSchema is the schema of the LOGGED copy.
func (d *database) loggedSchema() string { return d.schema + loggedSuffix }

// loggedTable is the LOGGED copy's qualified name.
func (d *database) loggedTable() string { return d.loggedSchema() + ".idempotency_keys" }

func (d *database) setupLogged(ctx context.Context, admin *pgx.Conn) error {
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+d.loggedSchema()); err != nil {
		return err
	}
	u, err := pgtest.WithSearchPath(d.baseURL, d.loggedSchema())
	if err != nil {
		return err
	}
	pool, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: u, MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := migrate.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrations of the LOGGED copy: %w", err)
	}
	if _, err := admin.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE '%-' || $1`, d.loggedSchema()); err != nil {
		return fmt.Errorf("unscheduling the purge jobs: %w", err)
	}
	_, err = admin.Exec(ctx, "ALTER TABLE "+d.loggedTable()+" SET LOGGED")
	return err
}

// newPool returns a pool as the functions build it (package dbpool, URL
// mode) on the bench's schema, with room for maxConns connections.
func (d *database) newPool(ctx context.Context, maxConns int32) (*pgxpool.Pool, error) {
	return dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: d.url, MaxConns: maxConns})
}

func (d *database) close() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.cluster != nil {
		_ = d.cluster.Destroy()
		return
	}
	if d.schema != "" {
		pgtest.DropSchema(context.Background(), d.baseURL, d.loggedSchema())
		pgtest.DropSchema(context.Background(), d.baseURL, d.schema)
	}
}
