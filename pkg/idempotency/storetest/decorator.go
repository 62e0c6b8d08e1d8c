package storetest

import "testing"

// runDecoratorCases runs the cases that go through idempotency.Wrap.
func runDecoratorCases(t *testing.T, s suite) {}
