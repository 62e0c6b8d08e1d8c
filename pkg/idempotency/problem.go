package idempotency

// ProblemContentType is the media type of every refusal the HTTP shapes
// answer with: an RFC 9457 problem object whose "code" member is one of the
// Code constants.
const ProblemContentType = "application/problem+json"

// The stable codes of the HTTP shapes' refusals, in the "code" member of the
// problem+json body. Clients and tests branch on these; they never change
// meaning.
const (
	// CodeKeyMissing: a protected request without the key header (400).
	CodeKeyMissing = "idempotency_key_missing"
	// CodeKeyInvalid: a key that is not of Config's key format (400).
	CodeKeyInvalid = "idempotency_key_invalid"
	// CodeUnauthenticated: no user could be taken from the request (401).
	CodeUnauthenticated = "unauthenticated"
	// CodeKeyInUse: the first request with this key still runs (409).
	CodeKeyInUse = "idempotency_key_in_use"
	// CodeKeyReused: the key was used with a different request (422).
	CodeKeyReused = "idempotency_key_reused"
	// CodeStoreUnavailable: the store could not be reached; the handler did
	// not run (503, Retry-After).
	CodeStoreUnavailable = "idempotency_store_unavailable"
	// CodeStoreMisconfigured: the store refused the claim for good (a
	// deployment to fix); the handler did not run (500, no Retry-After).
	CodeStoreMisconfigured = "idempotency_store_misconfigured"
	// CodeResponseNotKept: the request with this key ran, but its response
	// was too large to keep for replay; it does not run again (422).
	CodeResponseNotKept = "idempotency_response_not_kept"
	// CodeResponseMismatch: the handler completed its record in its own
	// transaction with another response than it answered with; a retry
	// replays the completed one (500).
	CodeResponseMismatch = "idempotency_response_mismatch"
	// CodeValidation: the body could not be read as sent (a body marked
	// base64 that is not base64) (400).
	CodeValidation = "validation_failed"
	// CodePayloadTooLarge: the body is over Config.MaxBodyBytes (413).
	CodePayloadTooLarge = "payload_too_large"
)
