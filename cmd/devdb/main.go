// Command devdb starts and stops the private PostgreSQL cluster (with pg_cron)
// that tests and local runs share, under .local/pg.
//
//	devdb start    start (creating it on first use), migrate, print its URL
//	devdb url      print the URL (starting the cluster if needed)
//	devdb stop     stop it; its data stays for the next start
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "devdb:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("usage: devdb start|url|stop")
	}
	ctx := context.Background()
	switch args[0] {
	case "start", "url":
		u, err := pgtest.SharedURL(ctx)
		if err != nil {
			return err
		}
		if args[0] == "start" {
			if err := migrateUp(ctx, u); err != nil {
				return err
			}
		}
		fmt.Println(u)
		return nil
	case "stop":
		return pgtest.StopShared(ctx)
	default:
		return fmt.Errorf("unknown command %q: usage: devdb start|url|stop", args[0])
	}
}

func migrateUp(ctx context.Context, u string) error {
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := migrate.Up(ctx, pool)
	for _, r := range applied {
		fmt.Fprintf(os.Stderr, "devdb: applied %s\n", r.Name)
	}
	return err
}
