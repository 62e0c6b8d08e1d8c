// Package must unwraps the results of constructors that tests call with
// arguments known to be valid.
package must

// Value returns v, and panics when err is not nil: a test's setup that
// fails names its error in the panic.
func Value[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
