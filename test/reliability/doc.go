// Package reliability proves what the idempotency contract promises under
// the conditions that break idempotency layers in practice: the same key
// sent at once by several processes, each with its own pool (as Lambda
// execution environments are); a worker killed between its claim and its
// completion; a PostgreSQL crash that empties the UNLOGGED key table; a
// store outage; bad input of every kind through the local API Gateway;
// fuzzed requests; and a steady load.
//
// The package holds tests only. The fast cases run with `go test ./...`;
// the long ones run with -soak (or ICHIDO_SOAK=1) and fuzzing, which
// `make soak` drives and reports in docs/reliability.md.
//
// Worker processes are this test binary started again with
// ICHIDO_RELIABILITY_WORKER set: each one serves the task API through the
// local API Gateway (package localapi) with its own database pool, as a
// separate execution environment would.
package reliability
