package dbpool_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/ichido/ichido/pkg/dbpool"
)

// Straight to an Aurora cluster (no RDS Proxy): the same IAM mode, with the
// cluster's writer endpoint as DB_HOST and the RDS CAs to verify it.
func ExampleConfigFromEnv_cluster() {
	env := map[string]string{
		"DB_AUTH":            "iam",
		"DB_HOST":            "ichido.cluster-c9xyz1abcdef.eu-west-1.rds.amazonaws.com",
		"DB_NAME":            "ichido",
		"DB_USER":            "ichido_app",
		"AWS_REGION":         "eu-west-1",
		"DB_TLS_CA":          dbpool.CARDS,
		"DB_CONNECT_TIMEOUT": "3s",
	}
	cfg, err := dbpool.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(cfg.Host, cfg.CA, cfg.ConnectTimeout)
	// Output: ichido.cluster-c9xyz1abcdef.eu-west-1.rds.amazonaws.com rds 3s
}

// A function that would rather answer 503 than fail its cold start while an
// auto-paused cluster resumes keeps the pool Open returns with
// ErrUnreachable; each use then fails within the connect timeout until the
// cluster answers.
func ExampleOpen() {
	run := func(ctx context.Context) error {
		cfg, err := dbpool.ConfigFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		pool, err := dbpool.Open(ctx, cfg)
		if errors.Is(err, dbpool.ErrUnreachable) {
			slog.Warn("the database cannot be reached yet", "error", err)
		} else if err != nil {
			return err
		}
		defer pool.Close()
		// ... build the store and the handlers on pool, then lambda.Start.
		return nil
	}
	_ = run
}
