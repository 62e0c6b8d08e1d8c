package dbpool_test

import (
	"context"
	"fmt"
	"os"

	"github.com/ichido/ichido/pkg/dbpool"
)

// A function's main reads the settings once and opens the pool at cold
// start; a bad setting stops it with a message naming the variable.
func ExampleConfigFromEnv() {
	env := map[string]string{
		"DB_AUTH":    "iam",
		"DB_HOST":    "tasks.proxy-abc123.eu-west-1.rds.amazonaws.com",
		"DB_NAME":    "ichido",
		"DB_USER":    "app",
		"AWS_REGION": "eu-west-1",
		"PGSSLMODE":  "prefer",
	}
	_, err := dbpool.ConfigFromEnv(func(k string) string { return env[k] })
	fmt.Println(err)
	// Output: dbpool: PGSSLMODE: is "prefer" but DB_AUTH is "iam", which always verifies the server certificate and host name (verify-full); unset PGSSLMODE
}

func ExampleNew() {
	run := func(ctx context.Context) error {
		cfg, err := dbpool.ConfigFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		pool, err := dbpool.New(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		// ... build the store and the handlers on pool, then lambda.Start.
		return nil
	}
	_ = run
}
