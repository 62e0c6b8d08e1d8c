package idempotency_test

import "github.com/ichido/ichido/pkg/idempotency/memstore"

// memStore is the in-memory Store of package memstore, which the tests of
// this package run on.
type memStore = memstore.Store

func newMemStore() *memStore { return memstore.New() }
