package idemstore

import (
	"context"
	"time"
)

// Store keeps idempotency records: the four atomic primitives the engine
// calls, under the rules of the package documentation. Every implementation
// must pass the suite of package storetest.
type Store interface {
	// Claim atomically, in one round trip, either inserts the record as in
	// progress, owned by c.Owner with a lease until c.LeaseUntil, or returns
	// the live record already there. A record whose ExpiresAt is at or before
	// now, or which is in progress with a lease at or before now, counts as
	// absent and is taken over (replaced as if inserted), now being the
	// earlier of c.Now and the server's clock. A claim repeated by the same
	// owner on its own in-progress record for the same Fingerprint succeeds
	// (a lost reply); for another Fingerprint it does not (owner tokens need
	// not be unique).
	//
	// The returned ClaimResult has Claimed true when c.Owner now holds the
	// record; otherwise Record is the existing record: its Status, its
	// Fingerprint (compared by the caller) and, when completed, its Response.
	// A Store may leave a non-claimed Record's Owner and times zero.
	//
	// Errors: *Error on any failure.
	Claim(ctx context.Context, c Claim) (ClaimResult, error)

	// Complete stores the response on the record named by c.Ref, marks it
	// completed and sets its expiry to c.ExpiresAt, but only while c.Ref.Owner
	// still owns it as in progress.
	//
	// A response whose record would exceed the store's largest record is
	// refused before anything is sent. A Response with NotKept set must be
	// kept with its mark, and returned by Claim with it.
	//
	// Errors: ErrLeaseLost when the record is gone or owned by someone else
	// (nothing is written); a permanent *Error wrapping ErrTooLarge
	// when the response does not fit (nothing is written, the record stays
	// the caller's, in progress); *Error on any other failure.
	Complete(ctx context.Context, c Completion) error

	// Release deletes the in-progress record named by r, but only while
	// r.Owner owns it, so that the client's retry runs again.
	//
	// Errors: ErrLeaseLost when the record is gone or owned by someone else
	// (nothing is deleted); *Error on any other failure.
	Release(ctx context.Context, r Ref) error

	// Renew moves the lease of the in-progress record named by r.Ref to
	// r.LeaseUntil, but only while r.Ref.Owner still owns it as in progress,
	// so that a run that outlasts its first lease (one with no deadline, a
	// net/http request) keeps the record while it lasts and a crashed owner
	// loses it within one short lease. When r.LeaseUntil is after the
	// record's ExpiresAt, ExpiresAt moves to r.LeaseUntil too, so that a run
	// longer than the TTL is not expired under its owner. Nothing else of the
	// record changes. A renewal repeated (after a lost reply) succeeds again.
	//
	// Fencing: like Complete, Renew is fenced by the owner token and the
	// in-progress status only, and compares no times. An owner whose lease
	// ran out (by either clock) still owns the record until another claim
	// takes it over, and renewing then is safe: nobody else has run. It is
	// the takeover, judged by Claim against the earlier of the two clocks,
	// that ends ownership; from then on Renew answers ErrLeaseLost. The new
	// lease is the caller's time, stored as given, like Claim.LeaseUntil;
	// r.Now (the caller's clock) only tells a store with server-side expiry
	// how long the record must be kept from now.
	//
	// Errors: ErrLeaseLost when the record is gone, completed, or owned by
	// someone else (nothing is written); *Error on any other failure.
	Renew(ctx context.Context, r Renewal) error
}

// Renewal is the input of Store.Renew.
type Renewal struct {
	Ref
	// Now is the caller's current time.
	Now time.Time
	// LeaseUntil is the record's new lease: when the claim stops protecting
	// the record if it is not renewed, completed or released first.
	LeaseUntil time.Time
}

// Ref names one record and the owner token that claims it.
type Ref struct {
	// UserID is the authenticated user, a lower-case UUID (SubjectUUID of
	// the subject), or a function's derived scope id.
	UserID string
	// Key is the record's key, a lower-case UUID. It is the Idempotency-Key (a
	// UUID v4) itself, or the UUID derived from an opaque or prefixed key
	// (RecordKey) or a function's key (FunctionRecordID).
	Key string
	// Owner is the token of the invocation that claimed the record.
	Owner string
}

// Claim is the input of Store.Claim.
type Claim struct {
	Ref
	// Fingerprint is the request's fingerprint (hex SHA-256): what a repeat
	// of the same request must carry again.
	Fingerprint string
	// Now is the caller's current time; every expiry comparison uses it.
	Now time.Time
	// LeaseUntil is when the claim stops protecting the record if it is not
	// completed or released first.
	LeaseUntil time.Time
	// ExpiresAt is the record's expiry while in progress (Now + TTL); the
	// purge job and reads use it.
	ExpiresAt time.Time
}

// Inserted is the answer of a claim that wrote the caller's record. The record
// is in progress and owned by c.Owner, with its times at the microsecond
// precision the stores keep. A store calls it when its write inserted or took
// over the record.
func (c Claim) Inserted() ClaimResult {
	return ClaimResult{Claimed: true, Record: Record{
		UserID:      c.UserID,
		Key:         c.Key,
		Owner:       c.Owner,
		Fingerprint: c.Fingerprint,
		Status:      StatusInProgress,
		CreatedAt:   time.UnixMicro(c.Now.UnixMicro()).UTC(),
		LeaseUntil:  time.UnixMicro(c.LeaseUntil.UnixMicro()).UTC(),
		ExpiresAt:   time.UnixMicro(c.ExpiresAt.UnixMicro()).UTC(),
	}}
}

// Found is the answer of a claim that found rec live. The caller's own
// in-progress claim of the same request again (a lost reply) counts as claimed.
// Any other record is returned as it is, not claimed.
func (c Claim) Found(rec Record) ClaimResult {
	if rec.Status == StatusInProgress && rec.Owner == c.Owner && rec.Fingerprint == c.Fingerprint {
		return ClaimResult{Claimed: true, Record: rec}
	}
	return ClaimResult{Record: rec}
}

// Live reports whether rec counts as present at now: not expired, and completed
// or in progress with a lease that has not run out. For a claim, now is the
// earlier of the caller's and the server's clock. A record that is not live is
// taken over as if absent.
func (rec Record) Live(now time.Time) bool {
	return rec.ExpiresAt.After(now) && (rec.Status == StatusCompleted || rec.LeaseUntil.After(now))
}

// ClaimResult is the output of Store.Claim.
type ClaimResult struct {
	// Claimed is true when the caller's owner token now holds the record
	// and the handler may run.
	Claimed bool
	// Record is the record as stored after the claim: the caller's own when
	// Claimed, the existing one otherwise.
	Record Record
}

// Completion is the input of Store.Complete.
type Completion struct {
	Ref
	// Response is the outcome a retry must see again.
	Response Response
	// Now is the caller's current time.
	Now time.Time
	// ExpiresAt is when the completed record expires (completion + TTL).
	ExpiresAt time.Time
}

// Status is the state of a record.
type Status string

const (
	// StatusInProgress marks a claimed record whose handler has not finished.
	StatusInProgress Status = "in_progress"
	// StatusCompleted marks a record that holds a stored response.
	StatusCompleted Status = "completed"
)

// Record is an idempotency record as a Store keeps it.
type Record struct {
	UserID      string
	Key         string
	Owner       string
	Fingerprint string
	Status      Status
	// Response is set when Status is StatusCompleted.
	Response  *Response
	CreatedAt time.Time
	// LeaseUntil is set while Status is StatusInProgress.
	LeaseUntil time.Time
	ExpiresAt  time.Time
}

// Response is a response kept for replay, byte for byte.
type Response struct {
	// StatusCode is the handler's HTTP status; 0 for a function's result,
	// which has none.
	StatusCode int `json:"status"`
	// Headers are the content headers kept for replay (Content-Type,
	// Content-Encoding, Location and those listed in Config.ReplayHeaders),
	// canonical names. Several values of one header are joined with ", ",
	// except Set-Cookie's, which are kept as a JSON array of strings.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the response body exactly as the handler returned it (base64
	// text when IsBase64Encoded; any bytes otherwise), or a function's
	// result as JSON.
	Body string `json:"body"`
	// IsBase64Encoded is the handler's own flag for Body.
	IsBase64Encoded bool `json:"isBase64Encoded,omitempty"`
	// NotKept marks the record of a run that completed but whose response could
	// not be kept. It was too large for the store (ErrTooLarge), or a
	// function's result does not encode as JSON. StatusCode then holds the
	// first response's status (0 for a function), and Headers, Body and
	// IsBase64Encoded are empty. A Store keeps the mark with the record and
	// returns it from Claim like any other field. The engine answers a retry
	// with it and never runs the work again. HTTP gets 422
	// idempotency_response_not_kept, a function ErrResultNotKept, and SQS a
	// record skipped as done.
	NotKept bool `json:"notKept,omitempty"`
	// Origin names the traced run that produced the response, so that a
	// replay can point at it; nil when that run was not traced. A Store
	// keeps it with the record and returns it from Claim and Admin.Get like
	// any other field (At to the microsecond, in UTC).
	Origin *Origin `json:"origin,omitempty"`
}

// Origin is the run that produced a stored response, as a tracing system names
// it. It holds the W3C trace-context trace and span ids (lower-case hex, 32 and
// 16 characters) and when the run completed.
type Origin struct {
	TraceID string    `json:"trace"`
	SpanID  string    `json:"span"`
	At      time.Time `json:"at"`
}

// Checker is implemented by a Store that can check what its three calls need
// before the first request. That is what CheckStore's probe does not show, such
// as a purge job or a server setting. Check changes no record, and returns nil
// or a *Error, with Permanent set when the fault is one of configuration that
// retrying will not cure.
type Checker interface {
	Check(ctx context.Context) error
}

// Admin is an optional capability of a Store: reading and deleting records by
// user and key. Operators use it through the operations command's get, list and
// delete. It also gives Config.OnReplay the record's times when the claim did
// not return them. pgstore, redisstore, dynamostore and memstore implement it.
// None of it is on a request's hot path, except Get for a replay hook on a
// store whose claim returns no times (pgstore).
//
// A record whose ExpiresAt has passed counts as absent, as for Claim. The
// server's clock judges that, where there is one. An in-progress record whose
// lease ran out is still returned, and its LeaseUntil says so. That is what an
// operator looks for.
type Admin interface {
	// Get returns the record (userID, key), with its Response when
	// completed, or false when there is none.
	//
	// Errors: *Error on any failure.
	Get(ctx context.Context, userID, key string) (Record, bool, error)

	// List returns the records that q selects, newest (CreatedAt) first.
	// It may read every record of the store (Redis scans its keys): it is
	// for operators, not for a request's path.
	//
	// Errors: *Error on any failure.
	List(ctx context.Context, q ListQuery) ([]Record, error)

	// Delete removes the record (userID, key) whatever its state or owner,
	// and reports whether there was one. Deleting an in-progress record
	// lets the next request with its key run while the first may still be
	// running; the first one's completion then finds its lease lost and
	// stores nothing.
	//
	// Errors: *Error on any failure.
	Delete(ctx context.Context, userID, key string) (bool, error)
}

// DefaultListLimit is how many records Admin.List returns when
// ListQuery.Limit is 0.
const DefaultListLimit = 100

// ListQuery selects the records Admin.List returns.
type ListQuery struct {
	// UserID, when set, selects one user's records (a lower-case UUID, as
	// SubjectUUID or FunctionRecordID gives it). Defaults to every user.
	UserID string
	// Status, when set, selects the records in that state (StatusInProgress
	// to find what is still running or was left by a crash). Defaults to
	// both.
	Status Status
	// Limit is the most records returned. Defaults to 100
	// (DefaultListLimit).
	Limit int
}

// Limited returns q.Limit, or DefaultListLimit when it is 0 or less: the
// limit a Store applies.
func (q ListQuery) Limited() int {
	if q.Limit <= 0 {
		return DefaultListLimit
	}
	return q.Limit
}
