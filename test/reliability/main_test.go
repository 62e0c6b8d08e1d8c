package reliability

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"
)

// soakFlag turns on the long cases; ICHIDO_SOAK=1 does too.
var soakFlag = flag.Bool("soak", false, "run the long reliability cases (make soak)")

// soak reports whether the long cases run.
func soak() bool { return *soakFlag || os.Getenv("ICHIDO_SOAK") == "1" }

// scale returns fast in a normal run and long in a soak run.
func scale(fast, long int) int {
	if soak() {
		return long
	}
	return fast
}

// Environment of the test binary itself.
const (
	// envWorker makes the test binary a worker process (see worker_test.go).
	envWorker = "ICHIDO_RELIABILITY_WORKER"
	// envReport names a JSON file that receives the results of the cases
	// that ran, for the report of make soak.
	envReport = "ICHIDO_SOAK_REPORT"
)

func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	code := m.Run()
	if path := os.Getenv(envReport); path != "" {
		if err := results.write(path); err != nil {
			fmt.Fprintln(os.Stderr, "reliability: writing the report:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Result is one row of the reliability report: what was tried, how many
// times, what was seen and what was lost (which must be nothing).
type Result struct {
	// Case names the property, e.g. "concurrency across processes".
	Case string `json:"case"`
	// Tried says what was done.
	Tried string `json:"tried"`
	// Times is how many times it was done (rounds, requests, kills).
	Times int `json:"times"`
	// Seen summarises the answers and states observed.
	Seen string `json:"seen"`
	// Lost lists what was lost or duplicated; "nothing" when nothing was.
	Lost string `json:"lost"`
	// Test is the Go test that produced the row.
	Test string `json:"test"`
	// Passed is whether that test passed.
	Passed bool `json:"passed"`
}

type resultSet struct {
	mu   sync.Mutex
	rows []*Result
}

var results resultSet

// record adds a row for t; its Passed field is filled in when t ends.
func record(t *testing.T, r Result) {
	t.Helper()
	r.Test = t.Name()
	t.Logf("%s × %d: %s\n  seen: %s\n  lost: %s", r.Case, r.Times, r.Tried, r.Seen, r.Lost)
	row := &r
	results.mu.Lock()
	results.rows = append(results.rows, row)
	results.mu.Unlock()
	t.Cleanup(func() {
		results.mu.Lock()
		row.Passed = !t.Failed()
		results.mu.Unlock()
	})
}

func (s *resultSet) write(path string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	rows := make([]Result, len(s.rows))
	for i, r := range s.rows {
		rows[i] = *r
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Test < rows[j].Test })
	b, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
