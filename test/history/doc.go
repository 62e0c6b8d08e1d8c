// Package history checks recorded histories of the real engine on the real
// stores under faults. Several worker processes (the test binary run again),
// each with many goroutines, call one idempotent Function over PostgreSQL,
// Redis and DynamoDB (moto's server) with random keys, payloads and handler outcomes (success,
// error, panic, slow), while faults are injected: replies lost after the
// store acted (a loopback proxy, storetest.ReplyCutter, in front of
// each worker's store connection), SIGSTOP pauses longer than a lease,
// SIGKILL, and clocks skewed within a bound (Config.Clock). Every call, every
// claim, every side effect and every finish is written to a log, which is
// checked afterwards with the porcupine linearizability checker against a
// sequential model of the Store contract, and by counting side effects per
// completed key (exactly one run completes a key; other runs of it are only
// those that lost their lease, and only after it ran out).
//
// The tests are in history_test.go; `make test` runs the short version and
// `make soak-history` the long one.
package history
