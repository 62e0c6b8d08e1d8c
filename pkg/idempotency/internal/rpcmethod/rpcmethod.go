// Package rpcmethod carries the method of a gRPC or Connect call from the
// adapters to the engine, so that the call's log line and span name it.
package rpcmethod

import (
	"context"
	"strings"
)

type key struct{}

// With returns ctx carrying the full method of a call, as the framework
// names it ("/package.Service/Method"). The adapters set it only for a
// method the server registered, so the set of values is bounded.
func With(ctx context.Context, fullMethod string) context.Context {
	return context.WithValue(ctx, key{}, fullMethod)
}

// From returns the method that ctx carries as OpenTelemetry's rpc.method
// names it ("package.Service/Method"), or "".
func From(ctx context.Context) string {
	m, _ := ctx.Value(key{}).(string)
	return strings.TrimPrefix(m, "/")
}
