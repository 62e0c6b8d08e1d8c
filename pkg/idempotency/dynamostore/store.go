package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// API is the part of the DynamoDB client that a Store calls.
// *dynamodb.Client implements it.
type API interface {
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
}

// DefaultTable is the table's name when Options.Table is empty.
const DefaultTable = "ichido-idempotency"

// MaxItemBytes is DynamoDB's largest item, 400 KB, attribute names and
// values together: the largest record the store can keep.
const MaxItemBytes = 400 * 1024

// AttributeNames are the names of a record's attributes. An empty field
// takes its default; the package comment describes each attribute.
type AttributeNames struct {
	// PartitionKey is the table's partition key (a String). Defaults to
	// "id".
	PartitionKey string
	// SortKey is the table's sort key (a String), for a table that has one. The
	// partition key then holds KeyPrefix and the user id, and the sort key the
	// idempotency key. Defaults to "": the table has no sort key.
	SortKey string
	// Status is "in_progress" or "completed". Defaults to "status".
	Status string
	// Owner is the owner token of the claim. Defaults to "owner".
	Owner string
	// Fingerprint is the request's fingerprint. Defaults to "request_hash".
	Fingerprint string
	// CreatedAt is when the record was claimed, Unix microseconds. Defaults
	// to "created_at".
	CreatedAt string
	// LeaseUntil is when the claim's lease ends, Unix microseconds, while in
	// progress. Defaults to "lease_until".
	LeaseUntil string
	// ExpiresAt is when the record expires, Unix microseconds: what the
	// store's reads go by. Defaults to "expires_at".
	ExpiresAt string
	// TTL is the attribute the table's Time to Live is set on, Unix
	// seconds: DynamoDB's own deletion of expired records. Defaults to
	// "expiration".
	TTL string
	// Response is the stored response, a map, once completed. Defaults to
	// "response".
	Response string
}

// DefaultAttributeNames are the attribute names of a table made with every
// default.
var DefaultAttributeNames = AttributeNames{
	PartitionKey: "id",
	Status:       "status",
	Owner:        "owner",
	Fingerprint:  "request_hash",
	CreatedAt:    "created_at",
	LeaseUntil:   "lease_until",
	ExpiresAt:    "expires_at",
	TTL:          "expiration",
	Response:     "response",
}

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// Table is the table's name (or ARN). Defaults to DefaultTable,
	// "ichido-idempotency".
	Table string
	// KeyPrefix starts the partition key of every record, so that several
	// services can share one table without sharing keys. It is an exact
	// boundary: a store sees the records of its own prefix alone, not those
	// of a prefix that starts with it (see the package comment). Defaults
	// to "".
	KeyPrefix string
	// Names are the attribute names, for a table made by other means.
	// Defaults to DefaultAttributeNames, field by field.
	Names AttributeNames
	// MaxRecordBytes is the largest completed record Complete writes, as
	// DynamoDB counts an item's size; a larger response is refused with
	// idemstore.ErrTooLarge and kept as the not-kept marker. A lower
	// limit bounds what a replay costs (see the package comment). Defaults
	// to MaxItemBytes, DynamoDB's limit, which is also the most it can be.
	MaxRecordBytes int
}

// Store is an idemstore.Store on one DynamoDB table. It is safe for
// concurrent use.
type Store struct {
	client    API
	table     *string
	prefix    string
	names     AttributeNames
	maxRecord int

	claimCond         *string
	claimNames        map[string]string
	takeoverLeaseCond *string
	takeoverDoneCond  *string
	takeoverNames     map[string]string
	completeUpdate    *string
	completeNames     map[string]string
	fenceCond         *string
	fenceNames        map[string]string
	renewUpdate       *string
	renewCond         *string
	renewNames        map[string]string
	renewFarUpdate    *string
	renewFarCond      *string
	renewFarNames     map[string]string
}

var _ idemstore.Store = (*Store)(nil)

// New returns a Store on the table that opts name, through client (a
// *dynamodb.Client; its retry settings are left as they are). It fails only
// when opts are inconsistent: two attributes under one name, or a name
// that is empty after the defaults.
func New(client API, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("dynamostore: the client is nil")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Table == "" {
		o.Table = DefaultTable
	}
	n := o.Names.withDefaults()
	if err := n.validate(); err != nil {
		return nil, err
	}
	s := &Store{client: client, table: aws.String(o.Table), prefix: o.KeyPrefix, names: n, maxRecord: MaxItemBytes}
	if o.MaxRecordBytes > 0 && o.MaxRecordBytes < MaxItemBytes {
		s.maxRecord = o.MaxRecordBytes
	}
	s.claimCond = aws.String("attribute_not_exists(#pk)")
	s.claimNames = map[string]string{"#pk": n.PartitionKey}
	// A takeover replaces the very record the claim judged absent: the
	// condition pins every attribute the judgement read (status, expiry,
	// lease), so a record changed since is judged again, never overwritten.
	s.takeoverLeaseCond = aws.String("attribute_not_exists(#pk) OR (#st = :seen_st AND #exp = :seen_exp AND #lease = :seen_lease)")
	s.takeoverDoneCond = aws.String("attribute_not_exists(#pk) OR (#st = :seen_st AND #exp = :seen_exp AND attribute_not_exists(#lease))")
	s.takeoverNames = map[string]string{"#pk": n.PartitionKey, "#st": n.Status, "#exp": n.ExpiresAt, "#lease": n.LeaseUntil}
	// The response comes first: DynamoDB applies an update whole or not at
	// all, but an emulator that applies it assignment by assignment and
	// refuses the item's size halfway then leaves the record as it was.
	s.completeUpdate = aws.String("SET #resp = :resp, #st = :completed, #exp = :exp, #ttl = :ttl REMOVE #lease")
	s.completeNames = map[string]string{"#st": n.Status, "#resp": n.Response, "#exp": n.ExpiresAt, "#ttl": n.TTL, "#lease": n.LeaseUntil, "#o": n.Owner}
	s.fenceCond = aws.String("#o = :owner AND #st = :in_progress")
	s.fenceNames = map[string]string{"#o": n.Owner, "#st": n.Status}
	// A renewal within the record's expiry moves the lease alone; one past
	// it moves the expiry (and the TTL) with it. Each is conditioned on its
	// case, so that the two cannot cross.
	s.renewUpdate = aws.String("SET #lease = :lease")
	s.renewCond = aws.String("#o = :owner AND #st = :in_progress AND #exp >= :lease")
	s.renewNames = map[string]string{"#o": n.Owner, "#st": n.Status, "#exp": n.ExpiresAt, "#lease": n.LeaseUntil}
	s.renewFarUpdate = aws.String("SET #lease = :lease, #exp = :lease, #ttl = :ttl")
	s.renewFarCond = aws.String("#o = :owner AND #st = :in_progress AND #exp < :lease")
	s.renewFarNames = map[string]string{"#o": n.Owner, "#st": n.Status, "#exp": n.ExpiresAt, "#lease": n.LeaseUntil, "#ttl": n.TTL}
	return s, nil
}

func (n AttributeNames) withDefaults() AttributeNames {
	d := DefaultAttributeNames
	pick := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	return AttributeNames{
		PartitionKey: pick(n.PartitionKey, d.PartitionKey),
		SortKey:      n.SortKey,
		Status:       pick(n.Status, d.Status),
		Owner:        pick(n.Owner, d.Owner),
		Fingerprint:  pick(n.Fingerprint, d.Fingerprint),
		CreatedAt:    pick(n.CreatedAt, d.CreatedAt),
		LeaseUntil:   pick(n.LeaseUntil, d.LeaseUntil),
		ExpiresAt:    pick(n.ExpiresAt, d.ExpiresAt),
		TTL:          pick(n.TTL, d.TTL),
		Response:     pick(n.Response, d.Response),
	}
}

func (n AttributeNames) validate() error {
	seen := map[string]string{}
	for _, f := range []struct{ field, name string }{
		{"PartitionKey", n.PartitionKey}, {"SortKey", n.SortKey}, {"Status", n.Status}, {"Owner", n.Owner},
		{"Fingerprint", n.Fingerprint}, {"CreatedAt", n.CreatedAt}, {"LeaseUntil", n.LeaseUntil},
		{"ExpiresAt", n.ExpiresAt}, {"TTL", n.TTL}, {"Response", n.Response},
	} {
		if f.name == "" {
			continue
		}
		if other, ok := seen[f.name]; ok {
			return fmt.Errorf("dynamostore: Options.Names.%s and Options.Names.%s are both %q: each attribute needs a name of its own", other, f.field, f.name)
		}
		seen[f.name] = f.field
	}
	return nil
}

// Table returns the name of the store's table.
func (s *Store) Table() string { return aws.ToString(s.table) }

// Key returns the primary key of the record of user's idempotency key:
// the partition key (and the sort key, when the table has one) as written.
// Both ids must be lower-case UUIDs, as the store's calls require.
func (s *Store) Key(userID, key string) map[string]types.AttributeValue {
	if s.names.SortKey != "" {
		return map[string]types.AttributeValue{
			s.names.PartitionKey: str(s.prefix + userID),
			s.names.SortKey:      str(key),
		}
	}
	return map[string]types.AttributeValue{s.names.PartitionKey: str(s.prefix + userID + "#" + key)}
}

// takeoverRounds bounds how often one claim judges a record and tries to
// take it over while other claims keep changing it.
const takeoverRounds = 4

// errKeptChanging ends a claim whose record changed on every round.
var errKeptChanging = errors.New("the record changed under every takeover attempt")

// Claim implements idemstore.Store. A claim of a free key, a replay and a
// duplicate are one request, a conditional PutItem; a takeover is a
// second one. See the package comment.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(c.UserID, c.Key)); err != nil {
		return idemstore.ClaimResult{}, s.storeError(ctx, "claim", err)
	}
	item := s.inProgressItem(c)
	in := &dynamodb.PutItemInput{
		TableName:                           s.table,
		Item:                                item,
		ConditionExpression:                 s.claimCond,
		ExpressionAttributeNames:            s.claimNames,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	for range takeoverRounds {
		cur, serverNow, err := s.put(ctx, in)
		if errors.Is(err, errItemGone) {
			continue
		}
		if err != nil {
			return idemstore.ClaimResult{}, s.storeError(ctx, "claim", err)
		}
		if cur == nil {
			return c.Inserted(), nil
		}
		rec, err := s.decodeItem(c.UserID, c.Key, cur)
		if err != nil {
			return idemstore.ClaimResult{}, s.storeError(ctx, "claim", err)
		}
		// The earlier of the caller's clock and DynamoDB's: a record is
		// taken over only when it is absent by both.
		now := c.Now
		if serverNow.Before(now) {
			now = serverNow
		}
		if rec.Live(now) {
			return c.Found(rec), nil
		}
		in = s.takeoverInput(item, rec)
	}
	return idemstore.ClaimResult{}, s.storeError(ctx, "claim", errKeptChanging)
}

// put runs a conditional PutItem. It returns nil when the item was written,
// else the item that made the condition fail, with a lower bound of
// DynamoDB's clock at this moment.
func (s *Store) put(ctx context.Context, in *dynamodb.PutItemInput) (map[string]types.AttributeValue, time.Time, error) {
	_, err := s.client.PutItem(ctx, in)
	received := time.Now()
	if err == nil {
		return nil, time.Time{}, nil
	}
	var failed *types.ConditionalCheckFailedException
	if !errors.As(err, &failed) {
		return nil, time.Time{}, err
	}
	serverNow := serverClock(err, received)
	if failed.Item != nil {
		return failed.Item, serverNow, nil
	}
	// A server that does not answer with the old item (DynamoDB always
	// does) costs a read: strongly consistent, so that it sees the item the
	// condition saw or a later one.
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.table, Key: keyOf(in.Item, s.names), ConsistentRead: aws.Bool(true)})
	received = time.Now()
	if err != nil {
		return nil, time.Time{}, err
	}
	if out.Item == nil {
		// Gone since the write failed (released, or deleted by TTL): the
		// next round writes it as a free key.
		return nil, time.Time{}, errItemGone
	}
	if d, ok := awsmiddleware.GetServerTime(out.ResultMetadata); ok {
		serverNow = d.Add(time.Since(received))
	}
	return out.Item, serverNow, nil
}

// errItemGone is never returned to a caller: put's fallback read found no
// item, and the claim writes again.
var errItemGone = errors.New("the item that failed the condition is gone")

// serverClock is a lower bound of DynamoDB's clock now: the Date header of
// its reply to the failed write, which gives the second the reply was made
// in, plus the time since the reply arrived. When the reply has no Date
// (a proxy that drops it), the process's own clock stands in.
func serverClock(err error, received time.Time) time.Time {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.Response != nil && re.Response.Response != nil {
		if d, perr := http.ParseTime(re.Response.Header.Get("Date")); perr == nil {
			return d.Add(time.Since(received))
		}
	}
	return time.Now()
}

// takeoverInput is the PutItem that replaces seen with item, conditioned
// on the record still being seen (or gone).
func (s *Store) takeoverInput(item map[string]types.AttributeValue, seen idemstore.Record) *dynamodb.PutItemInput {
	values := map[string]types.AttributeValue{
		":seen_st":  str(string(seen.Status)),
		":seen_exp": num(micros(seen.ExpiresAt)),
	}
	cond := s.takeoverDoneCond
	if seen.Status == idemstore.StatusInProgress {
		cond = s.takeoverLeaseCond
		values[":seen_lease"] = num(micros(seen.LeaseUntil))
	}
	return &dynamodb.PutItemInput{
		TableName:                           s.table,
		Item:                                item,
		ConditionExpression:                 cond,
		ExpressionAttributeNames:            s.takeoverNames,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// inProgressItem is the item of c's claim.
func (s *Store) inProgressItem(c idemstore.Claim) map[string]types.AttributeValue {
	item := s.Key(c.UserID, c.Key)
	n := s.names
	item[n.Status] = str(string(idemstore.StatusInProgress))
	item[n.Owner] = str(c.Owner)
	item[n.Fingerprint] = str(c.Fingerprint)
	item[n.CreatedAt] = num(micros(c.Now))
	item[n.LeaseUntil] = num(micros(c.LeaseUntil))
	item[n.ExpiresAt] = num(micros(c.ExpiresAt))
	item[n.TTL] = num(ttlOf(c.Now, later(c.LeaseUntil, c.ExpiresAt)))
	return item
}

// ttlOf is the TTL attribute of a record that is live until end by the
// caller's clock, whose now is callerNow: end in Unix seconds, rounded up,
// and moved later by as much as the caller's clock runs behind the
// process's (by more than a second), so that DynamoDB, on its own clock,
// does not delete a record of a caller whose clock runs behind while it
// is live.
func ttlOf(callerNow, end time.Time) int64 {
	if behind := time.Since(callerNow); behind > time.Second {
		end = end.Add(behind)
	}
	return epochSeconds(end)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// keyOf is the primary key of item.
func keyOf(item map[string]types.AttributeValue, n AttributeNames) map[string]types.AttributeValue {
	key := map[string]types.AttributeValue{n.PartitionKey: item[n.PartitionKey]}
	if n.SortKey != "" {
		key[n.SortKey] = item[n.SortKey]
	}
	return key
}

// decodeItem reads a record. userID and key are the caller's: the item's
// key attributes are not read back.
func (s *Store) decodeItem(userID, key string, item map[string]types.AttributeValue) (idemstore.Record, error) {
	n := s.names
	rec := idemstore.Record{UserID: userID, Key: key}
	status, err := stringOf(item, n.Status)
	if err != nil {
		return rec, err
	}
	if rec.Owner, err = stringOf(item, n.Owner); err != nil {
		return rec, err
	}
	if rec.Fingerprint, err = stringOf(item, n.Fingerprint); err != nil {
		return rec, err
	}
	if rec.CreatedAt, err = timeOf(item, n.CreatedAt); err != nil {
		return rec, err
	}
	if rec.ExpiresAt, err = timeOf(item, n.ExpiresAt); err != nil {
		return rec, err
	}
	switch idemstore.Status(status) {
	case idemstore.StatusInProgress:
		rec.Status = idemstore.StatusInProgress
		if rec.LeaseUntil, err = timeOf(item, n.LeaseUntil); err != nil {
			return rec, err
		}
	case idemstore.StatusCompleted:
		rec.Status = idemstore.StatusCompleted
		resp, ok := item[n.Response]
		if !ok {
			return rec, fmt.Errorf("%w: a completed record without %s", errNotRecord, n.Response)
		}
		if rec.Response, err = decodeResponse(resp); err != nil {
			return rec, err
		}
	default:
		return rec, fmt.Errorf("%w: unknown status %.40q", errNotRecord, status)
	}
	return rec, nil
}

// Complete implements idemstore.Store: one conditional UpdateItem, fenced by
// the owner token and the in-progress status. It is not fenced by the lease, as
// with the other stores. An owner whose lease ran out may still complete while
// nobody has taken the record over. A response whose record would exceed
// MaxItemBytes is refused before anything is sent.
func (s *Store) Complete(ctx context.Context, c idemstore.Completion) error {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(c.UserID, c.Key)); err != nil {
		return s.storeError(ctx, "complete", err)
	}
	resp := encodeResponse(c.Response)
	values := map[string]types.AttributeValue{
		":completed":   str(string(idemstore.StatusCompleted)),
		":in_progress": str(string(idemstore.StatusInProgress)),
		":owner":       str(c.Owner),
		":resp":        resp,
		":exp":         num(micros(c.ExpiresAt)),
		":ttl":         num(ttlOf(c.Now, c.ExpiresAt)),
	}
	if size := s.completedSize(c.Ref, resp); size > s.maxRecord {
		return s.storeError(ctx, "complete", tooLarge(size, s.maxRecord))
	}
	_, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 s.table,
		Key:                       s.Key(c.UserID, c.Key),
		UpdateExpression:          s.completeUpdate,
		ConditionExpression:       s.fenceCond,
		ExpressionAttributeNames:  s.completeNames,
		ExpressionAttributeValues: values,
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &failed):
		return idemstore.ErrLeaseLost
	case isItemTooLarge(err):
		return s.storeError(ctx, "complete", fmt.Errorf("%w (DynamoDB refused the item: %v)", errTooLarge, err))
	default:
		return s.storeError(ctx, "complete", err)
	}
}

// requestHashAllowance is what completedSize counts for the request hash,
// which a Completion does not carry: a hex SHA-256, with room to spare.
const requestHashAllowance = 128

// completedSize is the size of the completed record of ref with resp, as
// DynamoDB counts it (see itemSize), never less.
func (s *Store) completedSize(ref idemstore.Ref, resp types.AttributeValue) int {
	n := s.names
	item := s.Key(ref.UserID, ref.Key)
	item[n.Status] = str(string(idemstore.StatusCompleted))
	item[n.Owner] = str(ref.Owner)
	item[n.Fingerprint] = str(strings.Repeat("0", requestHashAllowance))
	item[n.CreatedAt] = num(1 << 62)
	item[n.ExpiresAt] = num(1 << 62)
	item[n.TTL] = num(1 << 40)
	item[n.Response] = resp
	return itemSize(item)
}

// isItemTooLarge reports whether DynamoDB refused a write for the item's
// size.
func isItemTooLarge(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ValidationException" &&
		strings.Contains(strings.ToLower(api.ErrorMessage()), "item size")
}

// Release implements idemstore.Store: one conditional DeleteItem, fenced
// by the owner token and the in-progress status.
func (s *Store) Release(ctx context.Context, r idemstore.Ref) error {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(r.UserID, r.Key)); err != nil {
		return s.storeError(ctx, "release", err)
	}
	_, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                s.table,
		Key:                      s.Key(r.UserID, r.Key),
		ConditionExpression:      s.fenceCond,
		ExpressionAttributeNames: s.fenceNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":owner":       str(r.Owner),
			":in_progress": str(string(idemstore.StatusInProgress)),
		},
	})
	var failed *types.ConditionalCheckFailedException
	switch {
	case err == nil:
		return nil
	case errors.As(err, &failed):
		return idemstore.ErrLeaseLost
	default:
		return s.storeError(ctx, "release", err)
	}
}

// Renew implements idemstore.Store: one conditional UpdateItem that moves the
// lease, fenced by the owner token and the in-progress status. A lease past the
// record's ExpiresAt moves ExpiresAt and the TTL too, which costs a second
// UpdateItem. The first one's failed condition (the expiry) answers with the
// record. The second is conditioned on that case.
func (s *Store) Renew(ctx context.Context, r idemstore.Renewal) error {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(r.UserID, r.Key)); err != nil {
		return s.storeError(ctx, "renew", err)
	}
	values := map[string]types.AttributeValue{
		":owner":       str(r.Owner),
		":in_progress": str(string(idemstore.StatusInProgress)),
		":lease":       num(micros(r.LeaseUntil)),
	}
	in := &dynamodb.UpdateItemInput{
		TableName:                           s.table,
		Key:                                 s.Key(r.UserID, r.Key),
		UpdateExpression:                    s.renewUpdate,
		ConditionExpression:                 s.renewCond,
		ExpressionAttributeNames:            s.renewNames,
		ExpressionAttributeValues:           values,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	for range takeoverRounds {
		_, err := s.client.UpdateItem(ctx, in)
		var failed *types.ConditionalCheckFailedException
		switch {
		case err == nil:
			return nil
		case !errors.As(err, &failed):
			return s.storeError(ctx, "renew", err)
		}
		rec, err := s.decodeOwn(r.Ref, failed.Item)
		if err != nil {
			return s.storeError(ctx, "renew", err)
		}
		if rec == nil {
			return idemstore.ErrLeaseLost
		}
		// Still the caller's: the failed part was the expiry, which the
		// other case covers.
		if rec.ExpiresAt.Before(r.LeaseUntil) {
			values[":ttl"] = num(ttlOf(r.Now, r.LeaseUntil))
			in.UpdateExpression, in.ConditionExpression, in.ExpressionAttributeNames = s.renewFarUpdate, s.renewFarCond, s.renewFarNames
		} else {
			delete(values, ":ttl")
			in.UpdateExpression, in.ConditionExpression, in.ExpressionAttributeNames = s.renewUpdate, s.renewCond, s.renewNames
		}
	}
	return s.storeError(ctx, "renew", errKeptChanging)
}

// decodeOwn reads the item that failed a fenced write: nil when there is
// none or it is not ref's in-progress record.
func (s *Store) decodeOwn(ref idemstore.Ref, item map[string]types.AttributeValue) (*idemstore.Record, error) {
	if item == nil {
		return nil, nil
	}
	rec, err := s.decodeItem(ref.UserID, ref.Key, item)
	if err != nil {
		return nil, err
	}
	if rec.Status != idemstore.StatusInProgress || rec.Owner != ref.Owner {
		return nil, nil
	}
	return &rec, nil
}

// permanentCodes are the error codes of DynamoDB (and of AWS's request
// signing) that no repetition of the same call overcomes: the deployment
// must change first.
var permanentCodes = map[string]string{
	"AccessDeniedException":               "the function's role may not use the table: grant dynamodb:PutItem, UpdateItem, DeleteItem, GetItem and DescribeTable on it",
	"UnrecognizedClientException":         "the credentials are not recognised (wrong account, region or endpoint?)",
	"InvalidSignatureException":           "the request signature was refused (wrong secret key or region?)",
	"IncompleteSignatureException":        "the request signature was refused",
	"MissingAuthenticationTokenException": "the request was not signed (no credentials?)",
	"ResourceNotFoundException":           "the table does not exist (Options.Table; IdempotencyStore=dynamodb in the stack creates it)",
	"ValidationException":                 "DynamoDB refused the request (do Options.Names match the table's key schema?)",
	"KMSAccessDeniedException":            "the table's KMS key may not be used by the function's role",
}

// storeError is the one place where a client error becomes a
// *idemstore.Error: a cancelled or expired context stays visible to
// errors.Is, a failure no retry cures is marked permanent, and the failures
// an operator can act on get a message that says what to do.
func (s *Store) storeError(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	permanent := false
	var api smithy.APIError
	switch {
	case errors.Is(err, errTooLarge), errors.Is(err, idemstore.ErrNotID):
		permanent = true
	case errors.Is(err, errNotRecord):
		permanent = true
		err = fmt.Errorf("an item under the store's keys in table %s is not a record of this store (is Options.KeyPrefix shared with other data, or do Options.Names not match the table?): %w", s.Table(), err)
	case errors.As(err, &api):
		if hint, ok := permanentCodes[api.ErrorCode()]; ok {
			permanent = true
			err = fmt.Errorf("%s: table %s: %w", hint, s.Table(), err)
		}
	}
	return newStoreError(op, err, permanent)
}
