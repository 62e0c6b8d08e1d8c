package taskfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/dbsetup"
	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/pkg/dbpool"
)

// MigrationSummary is what the migrate function answers: the migrations it
// applied (none when the database was up to date) and the version the
// database is at afterwards, and, when it prepared the users too, what that
// did.
type MigrationSummary struct {
	// Applied lists the migrations applied by this run, oldest first.
	Applied []AppliedMigration `json:"applied"`
	// Version is the newest applied migration's version after the run.
	Version int64 `json:"version"`
	// Setup is what the database setup did; nil when the function only
	// applied the migrations (DB_SETUP_MIGRATE_USER unset).
	Setup *dbsetup.Summary `json:"setup,omitempty"`
}

// AppliedMigration is one migration applied by a run.
type AppliedMigration struct {
	// Version is the migration's number (00001_tasks.sql is 1).
	Version int64 `json:"version"`
	// Name is the migration's file name.
	Name string `json:"name"`
}

// Migrator prepares the database the environment names. It holds no
// connection between runs: the migrate function runs once a deploy.
//
// With DB_SETUP_MIGRATE_USER, DB_SETUP_APP_USER and DB_SETUP_CHECK_USER
// set (the deployed function), it runs the whole database setup (package dbsetup): DB_USER is
// then the master user, and the setup connects as the migrate user too (in
// iam mode with a token for that user, in url mode with DATABASE_URL's user
// replaced). Unset (local runs), it applies the migrations as the user it
// connects as.
type Migrator struct {
	db    dbpool.Config
	setup *dbsetup.Config
}

// NewMigrator reads the database settings (dbpool.ConfigFromEnv) through
// getenv once, so that a wrong setting fails at cold start. Errors match
// ErrConfig. The Migrator applies the migrations; WithSetup makes it run
// the whole database setup.
func NewMigrator(getenv func(string) string) (*Migrator, error) {
	db, err := dbpool.ConfigFromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Migrator{db: db}, nil
}

// WithSetup returns a Migrator that runs the database setup (package
// dbsetup) with migrateUser owning the objects, appUser for the task
// functions and checkUser for the purge check; the configured user
// (DB_USER, or DATABASE_URL's) is the master user. The migrate function
// reads the three names from DB_SETUP_MIGRATE_USER, DB_SETUP_APP_USER and
// DB_SETUP_CHECK_USER; with all empty it returns m unchanged (migrations
// only, as local runs do). Errors match ErrConfig.
func (m *Migrator) WithSetup(migrateUser, appUser, checkUser string) (*Migrator, error) {
	migrateUser, appUser, checkUser = strings.TrimSpace(migrateUser), strings.TrimSpace(appUser), strings.TrimSpace(checkUser)
	switch {
	case migrateUser == "" && appUser == "" && checkUser == "":
		return m, nil
	case migrateUser == "" || appUser == "" || checkUser == "":
		return nil, fmt.Errorf("%w: %w", ErrConfig, &ConfigError{"DB_SETUP_MIGRATE_USER", "and DB_SETUP_APP_USER and DB_SETUP_CHECK_USER must all be set (the database setup) or all left empty (migrations only)"})
	}
	master, dbName, err := whoAndWhere(m.db)
	if err != nil {
		return nil, err
	}
	out := *m
	out.setup = &dbsetup.Config{Database: dbName, MasterUser: master, MigrateUser: migrateUser, AppUser: appUser, CheckUser: checkUser}
	return &out, nil
}

// whoAndWhere returns the user and the database the settings connect to.
func whoAndWhere(db dbpool.Config) (user, database string, err error) {
	if db.Auth == dbpool.AuthIAM {
		return db.User, db.Database, nil
	}
	u, err := url.Parse(db.URL)
	if err != nil || u.Scheme == "" || u.User == nil || u.User.Username() == "" {
		return "", "", fmt.Errorf("%w: %w", ErrConfig, &ConfigError{"DATABASE_URL", "must be a postgres:// URL with a user name for the database setup"})
	}
	return u.User.Username(), strings.TrimPrefix(u.Path, "/"), nil
}

// as returns the settings with user in place of the configured one.
func (m *Migrator) as(user string) dbpool.Config {
	c := m.db
	if c.Auth == dbpool.AuthIAM {
		c.User = user
		return c
	}
	u, _ := url.Parse(c.URL) // checked by NewMigrator
	if pw, ok := u.User.Password(); ok {
		u.User = url.UserPassword(user, pw)
	} else {
		u.User = url.User(user)
	}
	c.URL = u.String()
	return c
}

// Up runs the database setup (or, without DB_SETUP_MIGRATE_USER, applies
// every pending migration as the configured user) and returns what it did.
// Running it twice is harmless: the second run changes nothing.
func (m *Migrator) Up(ctx context.Context) (MigrationSummary, error) {
	if m.setup != nil {
		connect := func(ctx context.Context, user string) (*pgxpool.Pool, error) {
			return connectPatiently(ctx, m.as(user))
		}
		s, err := dbsetup.Apply(ctx, connect, *m.setup)
		sum := MigrationSummary{Applied: make([]AppliedMigration, 0, len(s.Applied)), Version: s.Version, Setup: &s}
		for _, name := range s.Applied {
			sum.Applied = append(sum.Applied, AppliedMigration{Version: versionOf(name), Name: name})
		}
		if err != nil {
			return sum, fmt.Errorf("taskfn: database setup: %w", err)
		}
		return sum, nil
	}
	pool, err := dbpool.New(ctx, m.db)
	if err != nil {
		return MigrationSummary{}, fmt.Errorf("taskfn: migrate: %w", err)
	}
	defer pool.Close()
	applied, err := migrate.Up(ctx, pool)
	sum := MigrationSummary{Applied: make([]AppliedMigration, 0, len(applied))}
	for _, r := range applied {
		sum.Applied = append(sum.Applied, AppliedMigration{Version: r.Version, Name: r.Name})
	}
	if err != nil {
		return sum, fmt.Errorf("taskfn: migrate: %w", err)
	}
	if sum.Version, err = migrate.Version(ctx, pool); err != nil {
		return sum, fmt.Errorf("taskfn: migrate: reading the version: %w", err)
	}
	return sum, nil
}

// connectRetry is how long the setup waits between connection attempts.
const connectRetry = 2 * time.Second

// connectPatiently connects as cfg says, trying again while the database
// cannot be reached for now (dbpool.ErrUnreachable: a dev cluster resuming
// from a pause, a proxy whose target is still registering), until ctx ends.
// Any other failure is returned at once.
func connectPatiently(ctx context.Context, cfg dbpool.Config) (*pgxpool.Pool, error) {
	for {
		pool, err := dbpool.New(ctx, cfg)
		if err == nil || !errors.Is(err, dbpool.ErrUnreachable) {
			return pool, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (gave up: %w)", err, ctx.Err())
		case <-time.After(connectRetry):
		}
	}
}

// versionOf reads the number a migration's file name starts with
// ("pgstore/0003_x.sql" and "00006_x.sql" alike).
func versionOf(name string) int64 {
	name = name[strings.LastIndexByte(name, '/')+1:]
	var v int64
	for _, r := range name {
		if r < '0' || r > '9' {
			break
		}
		v = v*10 + int64(r-'0')
	}
	return v
}

// Migrate is NewMigrator(getenv) followed by Up.
func Migrate(ctx context.Context, getenv func(string) string) (MigrationSummary, error) {
	m, err := NewMigrator(getenv)
	if err != nil {
		return MigrationSummary{}, err
	}
	return m.Up(ctx)
}

// SetupResourceID is the physical id of the stack's DatabaseSetup custom
// resource. It never changes, so that CloudFormation never asks to delete
// the setup of a live stack.
const SetupResourceID = "ichido-database-setup"

// Handle serves an invocation of the migrate function that is not
// CloudFormation's (dbsetup.CustomResource answers those): it runs Up and
// returns its summary, as `sam remote invoke` shows it.
func (m *Migrator) Handle(ctx context.Context, _ json.RawMessage) (any, error) {
	return m.Up(ctx)
}
