// Package rpcidem is the machinery that the RPC adapters, grpcidem and
// connectidem, share: how a call's key is read and its record named, its
// fingerprint, which handler errors are kept, the refusals and their codes,
// the kept answer's envelope, and the flow around idempotency.Function. An
// adapter adds only what is its framework's: where the key arrives, how a
// status is built, the interceptor's signature, protobuf's encoding.
//
// It speaks in plain values so that the library needs none of the
// frameworks: codes are gRPC's code numbers (connect.Code's are the same),
// and messages arrive already encoded, in protobuf's deterministic encoding.
//
// Its API is no promise: it changes with the library. The adapters are
// modules of their own that import it, so each release of an adapter
// requires the library at the version it was released with.
package rpcidem
