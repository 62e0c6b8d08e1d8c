// Package storetest proves an idemstore.Store on a real server. It checks the
// store contract case by case, then the engine's behaviour on the store. That
// covers every HTTP shape, net/http, Function and SQSHandler, a lost claim
// reply, and one SQS batch handled by several processes at once. It is for
// store authors; every store of this module passes it.
//
// A store's test calls Run once with what the suite needs:
//
//	func TestStore(t *testing.T) {
//		storetest.Run(t, storetest.Config{
//			New: func(t *testing.T) idemstore.Store {
//				return mystore.New(newClientFor(t))
//			},
//			NewBrokenStore: func(t *testing.T) idemstore.Store {
//				return mystore.New(clientOnAClosedPort(t))
//			},
//		})
//	}
//
// New is called once per contract case and once per behaviour table. The cases
// run in parallel, each with fresh random users and keys. So the stores New
// hands out may share one database.
//
// The contract's cases pass every time in, and no case sleeps. Stores decide
// takeover and expiry against the earlier of the caller's clock and their
// server's. So the suite's clock starts an hour in the past and moves forward
// from there. A store that consulted only its own clock would see the suite's
// leases as long run out. It would fail the conflict cases. Records keep a TTL
// of a day, so that no purge running on real time touches them. Two cases use
// the real time. They show that a caller whose clock runs ahead cannot take
// over a live lease, and that one whose clock runs behind only takes over
// later. A store on its own clock fails ExpiryOnTheCallersClock, and the
// behaviour parts stop at once with the same message. When a claim does not
// hold the record, the suite checks Record.Owner and the times only where the
// store filled them in.
package storetest

import (
	"testing"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Part is a part of the suite; Config.Parts chooses which run.
type Part uint

const (
	// Contract runs the store contract's cases (and Admin's, when the store
	// has it), and the engine's races and failures through Wrap.
	Contract Part = 1 << iota
	// HTTP runs the decorator's behaviour table for every HTTP payload
	// shape and the net/http middleware.
	HTTP
	// Function runs the behaviour table of Function and SQSHandler.
	Function
	// Middleware runs the HTTP table over real HTTP through Config.Mount.
	Middleware
	// LostReply drops the reply of a committed claim (Config.Server and
	// Config.Through).
	LostReply
	// Processes has several processes handle one SQS batch
	// (Config.Processes).
	Processes
)

// Config says what Run runs on.
type Config struct {
	// New returns a store. Required but for the LostReply and Processes
	// parts alone.
	New func(t *testing.T) idemstore.Store
	// Parts chooses the parts to run. Defaults to Contract, HTTP and
	// Function, with Middleware when Mount is set, LostReply when Server is
	// set and Processes when Processes is set.
	Parts Part
	// NewBrokenStore returns a store whose server cannot be reached or has
	// gone (for example a client on a closed port). With it the suite checks
	// that every method fails with a *idemstore.Error and that the engine
	// answers 503 without running the handler. Defaults to nil: those cases
	// are skipped.
	NewBrokenStore func(t *testing.T) idemstore.Store
	// NewMisconfiguredStore returns a store whose server answers but refuses
	// its calls for good (credentials without the privileges the store needs).
	// With it the suite checks that every method fails with a permanent
	// *idemstore.Error, and that idempotency.CheckStore reports it. The engine
	// must answer 500 idempotency_store_misconfigured after one claim, without
	// Retry-After and without running the handler. Defaults to nil: those cases
	// are skipped.
	NewMisconfiguredStore func(t *testing.T) idemstore.Store
	// TooLargeBody is the length of a response body that New's stores cannot
	// keep (configure their largest record below it). With it the suite checks
	// that Complete refuses such a response with a permanent *idemstore.Error
	// wrapping idemstore.ErrTooLarge, and writes nothing. The engine must keep
	// the key completed with the not-kept marker. Defaults to 0: those cases
	// are skipped.
	TooLargeBody int
	// NewWithPrefix returns a store whose records live under prefix, its key
	// prefix ("" for the store's default). It is on the same server, database
	// or table as every other store it returns for the same test. With it the
	// suite checks that a prefix is an exact boundary. It runs stores on a
	// prefix, on that prefix with one more character, and on the default. Each
	// lists, gets, deletes and writes only its own records, whatever ids it is
	// given. Defaults to nil: that case is skipped (a store without prefixes
	// has nothing to check).
	NewWithPrefix func(t *testing.T, prefix string) idemstore.Store
	// Concurrency is how many goroutines race for one key in the concurrent
	// cases. Defaults to 50.
	Concurrency int
	// Mount puts the middleware in front of a handler in a router, for the
	// Middleware part. Defaults to nil (the HTTP part already runs the
	// middleware on a ServeMux).
	Mount Mount
	// Server is the address (host:port) of the store's server, for the
	// LostReply part: a ReplyCutter listens in front of it.
	Server string
	// Through returns a store whose client reaches its server at addr, the
	// ReplyCutter's address. The client does not retry commands on its own, so
	// that the engine's recovery is what is tested. Required with Server.
	Through func(t *testing.T, addr string) idemstore.Store
	// Processes configures the Processes part.
	Processes *ProcessesConfig
}

// ProcessesConfig configures the part in which several operating-system
// processes of the test binary handle one SQS batch at once.
type ProcessesConfig struct {
	// N is how many processes. Defaults to 8.
	N int
	// WorkerTest names the test that each process runs: a test that calls
	// BatchWorker with NewAt.
	WorkerTest string
	// URL is handed to NewAt in every process.
	URL string
	// NewAt returns a store on the server at url.
	NewAt func(t *testing.T, url string) idemstore.Store
}

// Run runs the parts of the suite that cfg chooses.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 50
	}
	parts := cfg.Parts
	if parts == 0 {
		parts = Contract | HTTP | Function
		if cfg.Mount != nil {
			parts |= Middleware
		}
		if cfg.Server != "" {
			parts |= LostReply
		}
		if cfg.Processes != nil {
			parts |= Processes
		}
	}
	if parts&(Contract|HTTP|Function|Middleware) != 0 && cfg.New == nil {
		t.Fatal("storetest: Config.New is required")
	}
	if parts&Contract != 0 {
		t.Run("Contract", func(t *testing.T) { t.Parallel(); runContract(t, cfg) })
	}
	if parts&HTTP != 0 {
		t.Run("HTTP", func(t *testing.T) { t.Parallel(); requireCallersClock(t, cfg.New(t)); runHTTP(t, cfg.New) })
	}
	if parts&Function != 0 {
		t.Run("Function", func(t *testing.T) { t.Parallel(); requireCallersClock(t, cfg.New(t)); runFunction(t, cfg.New) })
	}
	if parts&Middleware != 0 {
		mount := cfg.Mount
		if mount == nil {
			mount = ServeMux
		}
		t.Run("Middleware", func(t *testing.T) { t.Parallel(); requireCallersClock(t, cfg.New(t)); runMiddleware(t, cfg.New, mount) })
	}
	if parts&LostReply != 0 {
		if cfg.Server == "" || cfg.Through == nil {
			t.Fatal("storetest: the LostReply part needs Config.Server and Config.Through")
		}
		t.Run("LostReply", func(t *testing.T) {
			t.Parallel()
			cutter := NewReplyCutter(t, cfg.Server)
			runLostReply(t, cfg.Through(t, cutter.Addr()), cutter)
		})
	}
	if parts&Processes != 0 {
		p := cfg.Processes
		if p == nil || p.WorkerTest == "" || p.NewAt == nil {
			t.Fatal("storetest: the Processes part needs Config.Processes with WorkerTest and NewAt")
		}
		n := p.N
		if n <= 0 {
			n = 8
		}
		t.Run("Processes", func(t *testing.T) { runBatchAcrossProcesses(t, n, p.WorkerTest, p.URL, p.NewAt) })
	}
}
