// Command bench measures ichido on the machine it runs on, in one run, and
// writes docs/performance.md with its plots (docs/performance/*.png) and the
// raw figures (docs/performance/results.json).
//
// Every comparison is measured side by side in the same run: each
// measurement is repeated (five times by default), the sides interleaved
// (A B, B A, …) so that drift of a shared machine hits both, and reported as
// the median of the repetitions' p50, p99 and throughput, with ratios of
// those medians. How noisy the machine was is reported too: the spread of
// the repetitions and the coefficient of variation of a fixed CPU workload
// timed throughout the run. Nothing here asserts a speed; the report says
// which targets were met.
//
// Usage:
//
//	go run ./cmd/bench [-quick] [-out dir] [-only fingerprint,floor,beyond,hotpath,direct,poolfloor,delay,durability,e2e,coldstart,dynamodb,tracing,growth]
//
// A quick run (short loops, small tables) checks the harness end to end and
// writes to .local/bench/ unless -out says otherwise, so that its numbers
// never replace the report in docs/.
//
// PostgreSQL: with -database-url (default $DATABASE_URL) the bench works in
// a schema of its own there and drops it at the end; otherwise it starts a
// private cluster of its own (fsync and synchronous_commit on) and removes
// it at the end. Redis: a private redis-server (package redistest).
// DynamoDB: a private moto_server (package dynamotest), for requests and
// capacity, never for latency. The cold start uses aws-lambda-rie (-rie,
// else $PATH and $GOBIN). Tracing runs the OpenTelemetry adapter's
// benchmarks (package otelidem) with the go command.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
)

// config is what the flags choose.
type config struct {
	quick       bool
	out         string
	reps        int
	databaseURL string
	riePath     string
	only        []string

	floorDur, durDur, e2eDur, growthDur, warm time.Duration
	durClients                                []int
	e2eClients                                int
	growthSizes                               []int
	purgeRows                                 int
	purgeReps                                 int
	coldRuns                                  int
	maxOps                                    int
	before                                    string
	render                                    string
}

// sections in the order they run. growth runs last: it fills the table.
var sections = []string{"fingerprint", "floor", "beyond", "hotpath", "direct", "poolfloor", "delay", "durability", "e2e", "coldstart", "dynamodb", "tracing", "growth"}

func main() {
	if os.Getenv(envAwake) != "" {
		runAwakeLoop()
		return
	}
	log.SetFlags(log.Ltime)
	log.SetPrefix("bench: ")
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		log.Print(err)
		stop()
		os.Exit(1)
	}
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	var cfg config
	var only, sizes string
	fs.BoolVar(&cfg.quick, "quick", false, "short runs and small tables: checks the harness end to end in a minute or two")
	fs.StringVar(&cfg.out, "out", "", "folder that receives performance.md and performance/ (default docs/ at the module root; quick: .local/bench/)")
	fs.IntVar(&cfg.reps, "reps", 0, "repetitions of each measurement (default 5, quick 3)")
	fs.StringVar(&cfg.databaseURL, "database-url", os.Getenv("DATABASE_URL"), "PostgreSQL to measure (a schema of its own is used); empty starts a private cluster")
	fs.StringVar(&cfg.riePath, "rie", "", "path of aws-lambda-rie (default: $PATH, then $GOBIN, then GOPATH/bin)")
	fs.StringVar(&only, "only", "", "comma-separated sections to run: "+strings.Join(sections, ","))
	fs.StringVar(&sizes, "growth-sizes", "", "live-key counts of the growth section (default 10000,1000000,5000000; quick 10000,100000,200000)")
	fs.IntVar(&cfg.purgeRows, "purge-rows", 0, "expired keys purged per purge run (default 1000000; quick 100000)")
	fs.IntVar(&cfg.purgeReps, "purge-reps", 0, "purge runs (default 3; quick 1)")
	fs.IntVar(&cfg.coldRuns, "cold-runs", 0, "cold starts under the emulator (default 20; quick 5)")
	fs.StringVar(&cfg.render, "render", "", "measure nothing: write performance.md again from this results.json (the plots already drawn are kept)")
	fs.StringVar(&cfg.before, "before", "", "an earlier run's results.json to compare with in a before-and-after section (default: performance/before.json in the output folder, when it exists)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if cfg.out == "" {
		root, err := pgtest.ModuleRoot()
		if err != nil {
			return cfg, err
		}
		// A quick run's numbers are not the project's: keep them out of docs/.
		cfg.out = filepath.Join(root, "docs")
		if cfg.quick {
			cfg.out = filepath.Join(root, ".local", "bench")
		}
	}
	if cfg.quick {
		cfg.floorDur, cfg.durDur, cfg.e2eDur, cfg.growthDur, cfg.warm = 300*time.Millisecond, 400*time.Millisecond, 500*time.Millisecond, 300*time.Millisecond, 100*time.Millisecond
		cfg.growthSizes = []int{10_000, 100_000, 200_000}
		setDefault(&cfg.reps, 3)
		setDefault(&cfg.purgeRows, 100_000)
		setDefault(&cfg.purgeReps, 1)
		setDefault(&cfg.coldRuns, 5)
	} else {
		cfg.floorDur, cfg.durDur, cfg.e2eDur, cfg.growthDur, cfg.warm = 1500*time.Millisecond, 2*time.Second, 3*time.Second, 1500*time.Millisecond, 300*time.Millisecond
		cfg.growthSizes = []int{10_000, 1_000_000, 5_000_000}
		setDefault(&cfg.reps, 5)
		setDefault(&cfg.purgeRows, 1_000_000)
		setDefault(&cfg.purgeReps, 3)
		setDefault(&cfg.coldRuns, 20)
	}
	cfg.durClients = []int{1, 8, 32}
	cfg.e2eClients = 8
	cfg.maxOps = 2_000_000
	if sizes != "" {
		cfg.growthSizes = nil
		for _, s := range strings.Split(sizes, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n <= 0 {
				return cfg, fmt.Errorf("-growth-sizes: %q is not a positive count", s)
			}
			cfg.growthSizes = append(cfg.growthSizes, n)
		}
		slices.Sort(cfg.growthSizes)
	}
	if only != "" {
		for _, s := range strings.Split(only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(sections, s) {
				return cfg, fmt.Errorf("-only: unknown section %q (have %s)", s, strings.Join(sections, ","))
			}
			cfg.only = append(cfg.only, s)
		}
	}
	return cfg, nil
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func setDefault(p *int, v int) {
	if *p <= 0 {
		*p = v
	}
}

// bench is what the sections share.
type bench struct {
	cfg   config
	start time.Time
	db    *database
	redis *redis.Client
	// valkey is a Valkey 8.1 server, where the Redis store completes a
	// record with SET … IFEQ instead of its script (section 1e).
	valkey  *redis.Client
	devnull *os.File
	res     *Results
	plots   string // folder of the PNGs
	// before is the -before run, beforeNotes the notes beside it.
	before      *Results
	beforeNotes string
}

func run(ctx context.Context, cfg config) error {
	b := &bench{cfg: cfg, start: time.Now(), res: &Results{}}
	b.res.Started = b.start.UTC()
	b.res.Mode = "full"
	if cfg.quick {
		b.res.Mode = "quick"
	}
	b.res.Reps = cfg.reps
	b.res.Machine = describeMachine()
	b.plots = filepath.Join(cfg.out, "performance")
	if err := os.MkdirAll(b.plots, 0o755); err != nil {
		return err
	}
	var err error
	beforePath := cfg.before
	if beforePath == "" {
		if p := filepath.Join(b.plots, "before.json"); fileExists(p) {
			beforePath = p
		}
	}
	if beforePath != "" {
		if b.before, b.beforeNotes, err = loadBefore(beforePath); err != nil {
			return fmt.Errorf("-before: %w", err)
		}
	}
	if cfg.render != "" {
		return b.rerender(cfg.render)
	}
	if b.devnull, err = os.OpenFile(os.DevNull, os.O_WRONLY, 0); err != nil {
		return err
	}
	defer b.devnull.Close()

	b.res.Noise.measure("start", 5, b.start)
	log.Printf("mode %s, %d repetitions, %d CPUs, load %s", b.res.Mode, cfg.reps, b.res.Machine.CPUs, b.res.Machine.LoadStart)

	b.db, err = openDatabase(ctx, cfg.databaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer b.db.close()
	b.res.Postgres = serverSettings(ctx, b.db.pool)
	b.res.PostgresWhere = b.db.where
	log.Printf("PostgreSQL %s (%s), schema %s", b.res.Postgres["server_version"], b.db.where, b.db.schema)

	if srv, err := redistest.Start(ctx); err != nil {
		b.res.Notes = append(b.res.Notes, "Redis was not measured: "+err.Error())
		log.Printf("no Redis: %v", err)
	} else {
		defer srv.Stop()
		b.redis = redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
		defer b.redis.Close()
		b.res.Redis = redisSettings(ctx, b.redis)
	}
	if srv, err := redistest.StartValkey(ctx); err != nil {
		b.res.Notes = append(b.res.Notes, "Valkey was not measured: "+err.Error())
		log.Printf("no Valkey: %v", err)
	} else {
		defer srv.Stop()
		b.valkey = redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 64})
		defer b.valkey.Close()
		b.res.Valkey = redisSettings(ctx, b.valkey)
	}

	var failed []string
	for _, s := range sections {
		if len(cfg.only) > 0 && !slices.Contains(cfg.only, s) {
			continue
		}
		log.Printf("section %s", s)
		t := time.Now()
		if err := b.section(ctx, s); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			log.Printf("section %s failed: %v", s, err)
			b.res.Failures = append(b.res.Failures, fmt.Sprintf("%s: %v", s, err))
			failed = append(failed, s)
		}
		log.Printf("section %s took %s", s, time.Since(t).Round(time.Second))
		b.res.Noise.measure(s, 3, b.start)
	}
	b.res.Machine.LoadEnd = loadavg()
	b.res.Seconds = time.Since(b.start).Seconds()
	b.res.evaluate()
	if err := b.write(); err != nil {
		return err
	}
	log.Printf("wrote %s in %s", filepath.Join(cfg.out, "performance.md"), time.Since(b.start).Round(time.Second))
	if len(failed) > 0 {
		return fmt.Errorf("sections failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

func (b *bench) section(ctx context.Context, name string) error {
	switch name {
	case "fingerprint":
		return b.fingerprint()
	case "floor":
		return b.floor(ctx)
	case "beyond":
		return b.beyond(ctx)
	case "hotpath":
		return b.hotPath(ctx)
	case "direct":
		return b.direct(ctx)
	case "poolfloor":
		return b.poolFloor(ctx)
	case "delay":
		return b.delayed(ctx)
	case "durability":
		return b.durability(ctx)
	case "e2e":
		return b.endToEnd(ctx)
	case "coldstart":
		return b.coldStart(ctx)
	case "dynamodb":
		return b.dynamoDB(ctx)
	case "tracing":
		return b.tracing(ctx)
	case "growth":
		return b.growth(ctx)
	}
	return errors.New("unknown section " + name)
}

// mustStore returns a store made of valid arguments, and panics otherwise.
func mustStore[S any](s S, err error) S {
	if err != nil {
		panic(err)
	}
	return s
}
