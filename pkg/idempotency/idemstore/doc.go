// Package idemstore is the contract between ichido's engine and the
// databases that keep its records. It is for the few who write a store; a
// user of package idempotency never needs it beyond passing a store to
// Config.Store.
//
// A Store owns four atomic primitives, each one round trip: Claim,
// Complete, Release and Renew. The engine owns the flow around them: claim,
// run the work, then complete the record with its response or release it.
// Admin (Get, List, Delete) is an optional capability for operators, and
// Checker an optional start-up check.
//
// # The records
//
// A record is named by two lower-case UUIDs, Ref.UserID and Ref.Key,
// whatever the subject, the key format or the prefix the user chose: the
// engine derives them. It is in progress (claimed by an owner token, with a
// lease) or completed (holding the Response a retry is answered with), and
// it expires at ExpiresAt.
//
// # The rules every store keeps
//
// The owner token fences every write. Complete, Release and Renew change a
// record only while Ref.Owner owns it in progress; otherwise they write
// nothing and return ErrLeaseLost. Ownership ends only when another claim
// takes the record over; no method compares times to decide it.
//
// Two clocks. A claim takes over a record whose lease or expiry has passed. It
// judges against the earlier of the caller's clock (Claim.Now) and the
// server's. A caller whose clock runs ahead never takes over a lease that is
// live by the server's clock. One whose clock runs behind only takes over
// later. The times a store keeps are the caller's. Record.Live is the rule,
// written once.
//
// Lost replies. A claim can commit and its reply be lost; the engine then
// repeats it with the same owner token. A claim by the same owner of its own
// in-progress record for the same Fingerprint therefore succeeds again; for
// another Fingerprint it does not (owner tokens need not be unique). A
// repeated Renew succeeds again too. Claim.Inserted and Claim.Found build
// the claim's two answers.
//
// Size. Each store knows the largest record it can keep and refuses a
// larger response before sending it: Complete writes nothing and returns a
// permanent *Error wrapping ErrTooLarge. The engine then completes the
// record with the not-kept marker (Response.NotKept), which carries no
// headers and no body and which every store must keep.
//
// Errors. Apart from ErrLeaseLost, every failure is wrapped in a *Error, never
// returned as the driver's error. A store's one place of error translation sets
// Error.Permanent on what repeating the call cannot cure. That is missing
// privileges or objects and failed authentication. It is also a value under the
// store's keys that is not a record, ErrTooLarge and ErrNotID. Everything else
// (timeouts, refused or reset connections, a failover, throttling) is
// transient; when in doubt, transient. The engine answers a transient failure
// with 503 and Retry-After, a permanent one with 500 and no retry, and never
// runs the work without a claim.
//
// # What a store author asks
//
// Ids. Every method checks its ids with CheckIDs (List its UserID, when
// set) before it touches the server. A call with an id that is not a
// lower-case UUID fails with a *Error that wraps ErrNotID and is
// Permanent: no retry can cure it.
//
// Times. A store keeps a record's times to the microsecond, as the caller
// gave them.
//
// Late completion. Complete succeeds while the caller's owner token holds
// the record in progress, even after its lease ran out: only a takeover
// ends that right.
//
// Size. The suite's byte-for-byte case writes a body of 256 KiB, so a
// store whose records cannot hold about that much fails it.
//
// A record of a later format, written by a later release during a
// rolling deploy, is a transient failure: the client's retry reaches the
// later release. A value under the store's keys that is not a record at
// all is a permanent one.
//
// Delete removes a record whatever its expiry. A record that expired but was
// not yet removed may be reported as deleted or not: the store chooses. The
// answer is for display, and Get and List never show such a record.
//
// An embedded store (in the process, or a file) keeps every rule above; its own
// clock is the server's. It may leave out what has no meaning for it. Without a
// server to lose or privileges, it skips storetest's broken and misconfigured
// stores. With no reply on a network to lose and one process, it skips the
// LostReply and Processes parts. It skips prefixes when it has none.
//
// # Proving a store
//
// Package storetest runs the conformance suite and the engine's behaviour
// tables against a store on a real server; every store in this module
// passes it.
package idemstore
