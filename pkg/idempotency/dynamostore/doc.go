// Package dynamostore keeps idempotency records in one Amazon DynamoDB
// table, through aws-sdk-go-v2's service/dynamodb. It implements the same
// idemstore.Store contract as packages pgstore and redisstore and passes
// the same conformance suite, so a handler wrapped by idempotency.Wrap does
// not change when the store does. Every write is conditional on the owner
// token: a claim, a completion, a release and a renewal change nothing that
// the caller does not own. It costs nothing while idle and a write unit or
// two per request.
//
// # The table
//
// One item per record, on a table of on-demand capacity with Time to Live
// on (CreateTableInput and TimeToLiveInput describe it). Every attribute
// name is configurable (Options.Names), so that an existing table fits; the
// defaults match the layout of Powertools for AWS Lambda's DynamoDB layer
// (partition key "id", TTL on "expiration"):
//
//	id            S  partition key: KeyPrefix + user id + "#" + key; with a
//	                 sort key (Names.SortKey), KeyPrefix + user id, and the
//	                 key in the sort key
//	status        S  "in_progress" or "completed"
//	owner         S  the owner token of the claim
//	request_hash  S  the request's fingerprint
//	created_at    N  when the record was claimed, Unix microseconds
//	lease_until   N  when the lease ends, Unix microseconds (in progress only)
//	expires_at    N  when the record expires, Unix microseconds: what reads go by
//	expiration    N  Time to Live, Unix seconds (see Expiry)
//	response      M  the stored response, once completed:
//	                   status_code  N     the status
//	                   headers      M     each header, S (or B when its value
//	                                      is not valid UTF-8)
//	                   body         S|B   the body, S when valid UTF-8, else B,
//	                                      so that any byte replays as sent
//	                   is_base64    BOOL  the handler's flag, when set
//	                   not_kept     BOOL  the not-kept marker, when set
//	                   origin       M     the traced run that produced the
//	                                      response, when it has one:
//	                     trace_id   S|B   its trace id
//	                     span_id    S|B   its span id
//	                     at         N     when it completed, Unix microseconds
//
// The user id and the key are lower-case UUIDs of 36 characters each. Every
// call refuses other ids with a permanent error. So KeyPrefix is an exact
// boundary: what precedes the ids in a partition key is the prefix of the
// store that wrote the item. A store on "svc" never reads, writes, lists or
// deletes the records of "svc2" or of the store without a prefix. List
// skips every item that is not the store's own: another prefix's, a
// Powertools record in a shared table, an item that is not a record.
//
// The times are the caller's (Claim.Now and the times derived from it), as
// with the other stores. The functions need dynamodb:PutItem, UpdateItem,
// DeleteItem, GetItem and DescribeTable on the table, nothing else.
//
// # Operations
//
// A claim is a PutItem conditioned on attribute_not_exists(id), with
// ReturnValuesOnConditionCheckFailure ALL_OLD. When the key is free it is
// written: the caller holds the record. When it is not, the failed write
// answers with the item as it was, with no second request. The item is a
// replay, a duplicate in progress, a reused key, or the caller's own claim
// again. The last is a lost reply: same owner, same request hash, in
// progress. A first request is therefore two requests (the claim and the
// completion's UpdateItem) and a replay one. Only a server that leaves the
// item out of its answer (DynamoDB does not) costs a strongly consistent
// GetItem.
//
// A second PutItem takes over a record whose lease or expiry has passed.
// Its condition is that the record is still the one judged: its status,
// expires_at and lease_until unchanged, or the key free. Of claims racing
// for it, one wins and the others see its record.
//
// Complete is one UpdateItem and Release one DeleteItem, each conditioned on
// the owner token and the in-progress status. They are not conditioned on the
// lease: an owner whose lease ran out may still finish while nobody has taken
// the record over. Renew is one UpdateItem of lease_until under the same
// condition, and a second one when the new lease passes expires_at, which then
// moves with it.
//
// # Clocks
//
// Takeover is judged against the earlier of the caller's clock (Claim.Now)
// and DynamoDB's. A caller whose clock runs ahead never takes over a lease
// that is live by the server's clock. One whose clock runs behind only
// takes over later. DynamoDB has no clock that a condition expression can
// read. The Date header of its reply to the failed PutItem stands in for
// it. That is the very reply that carries the record. The header is taken
// as the start of its second and advanced by the time since the reply
// arrived. The result is a lower bound of the server's time. A reply
// without a Date (a proxy that drops it) leaves the process's own clock to
// stand in. The judgement is made in Go, and the takeover's condition
// makes it hold at the write.
//
// # Expiry
//
// Reads go by expires_at, to the microsecond. An item past it counts as absent
// whether or not DynamoDB has deleted it. TTL deletion runs in the background
// and can lag by days. The TTL attribute lets DynamoDB delete expired records
// at no cost. It is in Unix seconds, rounded up. While in progress it is the
// later of the lease and expires_at. Once completed it is expires_at. It moves
// later by as much as the caller's clock runs behind the process's, so that a
// record is not deleted while it is live.
//
// # Limits
//
// DynamoDB's largest item is 400 KB (MaxItemBytes), attribute names and values
// together. Complete measures the completed item as DynamoDB does before
// sending it. A response may not fit, or DynamoDB may refuse it for its size.
// Then Complete answers with a permanent *idemstore.Error wrapping
// idemstore.ErrTooLarge and writes nothing. The engine completes the record
// with the not-kept marker, so the work never runs twice.
// Options.MaxRecordBytes sets a lower limit.
//
// A replay is a failed conditional write. DynamoDB's documentation says it
// consumes write capacity by the size of the existing item: one write unit
// per KB, rounded up, at least one. A replay of a record of n KB costs n
// write units. A strongly consistent read would cost n/4 read units. A
// lower MaxRecordBytes bounds it.
//
// # Errors
//
// Failures that no retry cures are a *idemstore.Error with Permanent set
// (idemstore.IsPermanent):
//   - The table is missing (ResourceNotFoundException).
//   - Privileges (AccessDeniedException).
//   - Credentials (UnrecognizedClientException and the signature errors).
//   - A request DynamoDB refuses (ValidationException), such as names that
//     do not match the key schema.
//   - An item under the store's keys that is not a record.
//   - An id that is not a lower-case UUID.
//
// Throttling, server errors, timeouts and the network are transient. Check
// runs DescribeTable at start-up. It checks the table, its key schema, and
// the role's access, before the first request.
//
// # Operators
//
// The store implements idemstore.Admin, which serves the get, list and delete
// of the module's operations command. Get is a strongly consistent GetItem, and
// Delete a DeleteItem. List is a Scan of the table, or a Query of one user's
// records on a table with a sort key. They need an operator's grants (GetItem,
// DeleteItem, Scan, Query), which the functions' role does not have.
package dynamostore
