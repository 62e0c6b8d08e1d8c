package taskfn

import (
	"context"
	"fmt"

	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/pkg/dbpool"
)

// MigrationSummary is what the migrate function answers: the migrations it
// applied (none when the database was up to date) and the version the
// database is at afterwards.
type MigrationSummary struct {
	// Applied lists the migrations applied by this run, oldest first.
	Applied []AppliedMigration `json:"applied"`
	// Version is the newest applied migration's version after the run.
	Version int64 `json:"version"`
}

// AppliedMigration is one migration applied by a run.
type AppliedMigration struct {
	// Version is the migration's number (00001_tasks.sql is 1).
	Version int64 `json:"version"`
	// Name is the migration's file name.
	Name string `json:"name"`
}

// Migrator applies the embedded migrations to the database the environment
// names. It holds no connection between runs: the migrate function is
// invoked rarely, after a deploy.
type Migrator struct {
	db dbpool.Config
}

// NewMigrator reads the database settings (dbpool.ConfigFromEnv) through
// getenv once, so that a wrong setting fails at cold start. Errors match
// ErrConfig.
func NewMigrator(getenv func(string) string) (*Migrator, error) {
	db, err := dbpool.ConfigFromEnv(getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return &Migrator{db: db}, nil
}

// Up connects, applies every pending migration (migrate.Up) and returns
// what it applied. Applying twice is harmless: the second run applies none.
func (m *Migrator) Up(ctx context.Context) (MigrationSummary, error) {
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

// Migrate is NewMigrator(getenv) followed by Up.
func Migrate(ctx context.Context, getenv func(string) string) (MigrationSummary, error) {
	m, err := NewMigrator(getenv)
	if err != nil {
		return MigrationSummary{}, err
	}
	return m.Up(ctx)
}
