// Package history checks recorded histories of the real engine on the real
// stores under faults. Several worker processes (the test binary run again),
// each with many goroutines, call one idempotent Function over PostgreSQL,
// Redis and DynamoDB (moto's server) with random keys, payloads and handler outcomes (success,
// error, panic, slow), while faults are injected: replies lost after the
// store acted (a loopback proxy, storetest.ReplyCutter, in front of
// each worker's store connection), SIGSTOP pauses longer than a lease,
// SIGKILL, and clocks skewed within a bound (Config.Clock). One goroutine of
// each worker makes heartbeat runs: calls with no deadline, whose handlers
// outlast several renewals and stop when their context is cancelled, while
// the worker's renewals fail for longer than a lease now and then (lost
// requests or lost replies), so that another worker's retry takes the key
// over. Every call, every claim, every side effect, every renewal and every
// finish is written to a log, which is checked afterwards with the porcupine
// linearizability checker against a sequential model of the Store contract,
// by counting side effects per completed key (exactly one run completes a
// key; other runs of it are only those that lost their lease, or were told
// they might), and by comparing the runs' execution intervals on the wall
// clock: no two runs of a key execute at the same time.
//
// The tests are in history_test.go; `make test` runs the short version and
// `make soak-history` the long one.
package history
