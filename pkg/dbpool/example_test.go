package dbpool_test

import (
	"context"
	"fmt"
	"log"
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

// A function's main opens the pool once, at cold start, from its
// environment: on Lambda DB_AUTH=iam with DB_HOST, DB_NAME, DB_USER and
// AWS_REGION (RDS Proxy, IAM tokens, verify-full TLS); locally and in tests
// DB_AUTH=url with DATABASE_URL, as here. New checks that the server answers
// and is the writer before it returns.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := dbpool.ConfigFromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err) // names the variable that is wrong
	}
	pool, err := dbpool.New(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	// ... build the store and the handlers on pool, then lambda.Start.
	var one int
	if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		log.Fatal(err)
	}
	fmt.Println(one)
	// Output: 1
}
