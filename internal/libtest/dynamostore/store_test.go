package dynamostore_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestMain gives the Examples the environment a Lambda function has (a
// region, credentials, the table's name in IDEMPOTENCY_TABLE), with the
// SDK's endpoint variable pointing at the shared test server, then runs
// the tests and stops the server.
func TestMain(m *testing.M) {
	endpoint, err := dynamotest.SharedEndpoint()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	client := dynamotest.NewClientAt(endpoint, dynamotest.ClientOptions{})
	table := fmt.Sprintf("example-%d", os.Getpid())
	st, err := dynamostore.New(client, &dynamostore.Options{Table: table})
	if err == nil {
		_, err = client.CreateTable(context.Background(), st.CreateTableInput())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "AWS_REGION": dynamotest.Region,
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "IDEMPOTENCY_TABLE": table,
	} {
		os.Setenv(k, v)
	}
	dynamotest.Main(m)
}

// newTable creates a table of the store's default layout for t on client
// and returns its name. TTL is turned on as the stack does.
func newTable(t *testing.T, client *dynamodb.Client, opts *dynamostore.Options) string {
	t.Helper()
	o := dynamostore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Table = dynamotest.TableName(t)
	st, err := dynamostore.New(client, &o)
	require.NoError(t, err)
	dynamotest.CreateTable(t, client, st.CreateTableInput())
	_, err = client.UpdateTimeToLive(context.Background(), st.TimeToLiveInput())
	require.NoError(t, err)
	return o.Table
}

// newStore returns a store on a new table of its own.
func newStore(t *testing.T, opts *dynamostore.Options) (*dynamostore.Store, *dynamodb.Client) {
	t.Helper()
	client := dynamotest.NewClient(t)
	o := dynamostore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Table = newTable(t, client, opts)
	st, err := dynamostore.New(client, &o)
	require.NoError(t, err)
	return st, client
}

// storeOn is a factory of stores on one table.
func storeOn(client *dynamodb.Client, table string) func(t *testing.T) idemstore.Store {
	return func(t *testing.T) idemstore.Store {
		st, err := dynamostore.New(client, &dynamostore.Options{Table: table})
		require.NoError(t, err)
		return st
	}
}

// newBrokenStore returns a store whose client points at a port nothing
// listens on, and does not retry.
func newBrokenStore(t *testing.T) idemstore.Store {
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	c := dynamotest.NewClientAt(fmt.Sprintf("http://127.0.0.1:%d", port), dynamotest.ClientOptions{MaxAttempts: 1})
	st, err := dynamostore.New(c, nil)
	require.NoError(t, err)
	return st
}

func TestConformance(t *testing.T) {
	t.Parallel()
	client := dynamotest.NewClient(t)
	table := newTable(t, client, nil)
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: storeOn(client, table), NewBrokenStore: newBrokenStore,
		NewMisconfiguredStore: newStoreWithoutTable,
		TooLargeBody:          dynamostore.MaxItemBytes,
		NewWithPrefix: func(t *testing.T, prefix string) idemstore.Store {
			st, err := dynamostore.New(client, &dynamostore.Options{Table: table, KeyPrefix: prefix})
			require.NoError(t, err)
			return st
		}})
}

// newStoreWithoutTable returns a store on a table that does not exist:
// DynamoDB answers every call with ResourceNotFoundException.
func newStoreWithoutTable(t *testing.T) idemstore.Store {
	st, err := dynamostore.New(dynamotest.NewClient(t), &dynamostore.Options{Table: dynamotest.TableName(t)})
	require.NoError(t, err)
	return st
}

func newRef() idemstore.Ref {
	return idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
}

func claimAt(r idemstore.Ref, now time.Time, lease, ttl time.Duration) idemstore.Claim {
	return idemstore.Claim{Ref: r, Fingerprint: "h", Now: now, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(ttl)}
}

func completionAt(r idemstore.Ref, now time.Time, resp idemstore.Response, ttl time.Duration) idemstore.Completion {
	return idemstore.Completion{Ref: r, Response: resp, Now: now, ExpiresAt: now.Add(ttl)}
}

// requireStoreError checks that err is a *idemstore.Error of op.
func requireStoreError(t *testing.T, err error, op string) *idemstore.Error {
	t.Helper()
	var se *idemstore.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, op, se.Op)
	require.NotErrorIs(t, err, idemstore.ErrLeaseLost)
	return se
}

// TestConformanceOwnLayout runs the suite on a table of other attribute
// names, a sort key and a key prefix: a table made by other means fits.
func TestConformanceOwnLayout(t *testing.T) {
	t.Parallel()
	client := dynamotest.NewClient(t)
	opts := &dynamostore.Options{KeyPrefix: "orders:", Names: ownNames}
	opts.Table = newTable(t, client, opts)
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
		st, err := dynamostore.New(client, opts)
		require.NoError(t, err)
		return st
	}, NewWithPrefix: func(t *testing.T, prefix string) idemstore.Store {
		o := *opts
		o.KeyPrefix = prefix
		st, err := dynamostore.New(client, &o)
		require.NoError(t, err)
		return st
	}})
}

var ownNames = dynamostore.AttributeNames{
	PartitionKey: "pk", SortKey: "sk", Status: "s", Owner: "o", Fingerprint: "h",
	CreatedAt: "c", LeaseUntil: "l", ExpiresAt: "e", TTL: "ttl", Response: "r",
}

func getItem(t *testing.T, client *dynamodb.Client, st *dynamostore.Store, ref idemstore.Ref) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(st.Table()), Key: st.Key(ref.UserID, ref.Key), ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	return out.Item
}

func numAttr(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func strAttr(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// TestItemLayout pins the item as the package comment describes it: the
// keys, each attribute's name and type, times in Unix microseconds and the
// TTL in Unix seconds, rounded up.
func TestItemLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Ahead of the process's clock, so that the TTL is not moved (see
	// TestTTLFollowsTheServerClock); half a microsecond to see the rounding.
	now := time.Now().Add(time.Minute).Truncate(time.Microsecond).Add(500 * time.Nanosecond)
	for name, tc := range map[string]struct {
		opts *dynamostore.Options
		key  func(ref idemstore.Ref) map[string]types.AttributeValue
		n    dynamostore.AttributeNames
	}{
		"defaults": {nil, func(ref idemstore.Ref) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"id": strAttr(ref.UserID + "#" + ref.Key)}
		}, dynamostore.DefaultAttributeNames},
		"prefix": {&dynamostore.Options{KeyPrefix: "svc:"}, func(ref idemstore.Ref) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"id": strAttr("svc:" + ref.UserID + "#" + ref.Key)}
		}, dynamostore.DefaultAttributeNames},
		"own names and sort key": {&dynamostore.Options{KeyPrefix: "svc:", Names: ownNames}, func(ref idemstore.Ref) map[string]types.AttributeValue {
			return map[string]types.AttributeValue{"pk": strAttr("svc:" + ref.UserID), "sk": strAttr(ref.Key)}
		}, ownNames},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, client := newStore(t, tc.opts)
			ref := newRef()
			require.Equal(t, tc.key(ref), st.Key(ref.UserID, ref.Key))
			c := claimAt(ref, now, time.Minute, time.Hour)
			res, err := st.Claim(ctx, c)
			require.NoError(t, err)
			require.True(t, res.Claimed)

			n := tc.n
			want := tc.key(ref)
			want[n.Status] = strAttr("in_progress")
			want[n.Owner] = strAttr(ref.Owner)
			want[n.Fingerprint] = strAttr("h")
			want[n.CreatedAt] = numAttr(now.UnixMicro()) // truncated to the microsecond
			want[n.LeaseUntil] = numAttr(now.Add(time.Minute).UnixMicro())
			want[n.ExpiresAt] = numAttr(now.Add(time.Hour).UnixMicro())
			want[n.TTL] = numAttr(now.Add(time.Hour).Unix() + 1) // rounded up
			require.Equal(t, want, getItem(t, client, st, ref), "the in-progress item")

			done := now.Add(2 * time.Second)
			resp := idemstore.Response{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json", "X-Raw": "\xff"}, Body: `{"a":1}`}
			require.NoError(t, st.Complete(ctx, completionAt(ref, done, resp, 2*time.Hour)))
			delete(want, n.LeaseUntil)
			want[n.Status] = strAttr("completed")
			want[n.ExpiresAt] = numAttr(done.Add(2 * time.Hour).UnixMicro())
			want[n.TTL] = numAttr(done.Add(2*time.Hour).Unix() + 1)
			want[n.Response] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				"status_code": numAttr(201),
				"headers": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
					"Content-Type": strAttr("application/json"),
					"X-Raw":        &types.AttributeValueMemberB{Value: []byte{0xff}},
				}},
				"body": strAttr(`{"a":1}`),
			}}
			require.Equal(t, want, getItem(t, client, st, ref), "the completed item: no lease, the response map, the completion's expiry")

			// A traced run's response has its origin as a map of its own.
			traced := newRef()
			_, err = st.Claim(ctx, claimAt(traced, now, time.Minute, time.Hour))
			require.NoError(t, err)
			resp = idemstore.Response{StatusCode: 200, Body: "x", Origin: &idemstore.Origin{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", At: done}}
			require.NoError(t, st.Complete(ctx, completionAt(traced, done, resp, 2*time.Hour)))
			require.Equal(t, &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
				"status_code": numAttr(200),
				"body":        strAttr("x"),
				"origin": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{
					"trace_id": strAttr("4bf92f3577b34da6a3ce929d0e0e4736"),
					"span_id":  strAttr("00f067aa0ba902b7"),
					"at":       numAttr(done.UnixMicro()), // truncated to the microsecond
				}},
			}}, getItem(t, client, st, traced)[n.Response], "the response map with an origin")
		})
	}
}

// TestTTLFollowsTheServerClock: a caller whose clock runs behind gets a
// TTL moved later by as much, so that DynamoDB does not delete its record
// while it is live.
func TestTTLFollowsTheServerClock(t *testing.T) {
	t.Parallel()
	st, client := newStore(t, nil)
	c := claimAt(newRef(), time.Now().Add(-24*time.Hour), time.Minute, time.Hour)
	_, err := st.Claim(context.Background(), c)
	require.NoError(t, err)
	ttl, err := strconv.ParseInt(getItem(t, client, st, c.Ref)["expiration"].(*types.AttributeValueMemberN).Value, 10, 64)
	require.NoError(t, err)
	require.InDelta(t, time.Now().Add(time.Hour).Unix(), ttl, 10, "the TTL is an hour from now, not an hour from the caller's now")
}

// TestExpiredItemIsAbsent: DynamoDB's TTL deletion can lag by days, so
// an item past its expiry that is still in the table counts as absent (the
// test server never deletes by TTL at all).
func TestExpiredItemIsAbsent(t *testing.T) {
	t.Parallel()
	st, client := newStore(t, nil)
	ctx := context.Background()
	past := time.Now().Add(-48 * time.Hour)
	c := claimAt(newRef(), past, time.Minute, time.Hour)
	_, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, st.Complete(ctx, completionAt(c.Ref, past, idemstore.Response{StatusCode: 201, Body: "old"}, time.Hour)))
	require.NotNil(t, getItem(t, client, st, c.Ref), "the expired item is still in the table")

	again := claimAt(idemstore.Ref{UserID: c.UserID, Key: c.Key, Owner: uuid.NewString()}, time.Now(), time.Minute, time.Hour)
	again.Fingerprint = "other"
	res, err := st.Claim(ctx, again)
	require.NoError(t, err)
	require.True(t, res.Claimed, "an expired record is absent: the key is claimed afresh")
	require.Equal(t, "other", res.Record.Fingerprint)
}

// TestRequestsPerCall counts what goes over the wire: a first request is
// two requests (the claim's PutItem and the completion's UpdateItem), a
// replay, a duplicate in progress and a refused takeover one (the failed
// PutItem answers with the record), a takeover two, a release one.
func TestRequestsPerCall(t *testing.T) {
	t.Parallel()
	st, w, _ := wiredStore(t, nil)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	ref := newRef()
	c := claimAt(ref, now, 10*time.Second, time.Hour)

	res, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.Equal(t, []string{"PutItem"}, w.take(), "the claim of a free key")

	dup := c
	dup.Owner = uuid.NewString()
	res, err = st.Claim(ctx, dup)
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, []string{"PutItem"}, w.take(), "a duplicate in progress")

	ahead := dup
	ahead.Now = now.Add(13 * time.Second) // past the lease by the caller's clock only
	res, err = st.Claim(ctx, ahead)
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, []string{"PutItem"}, w.take(), "a caller ahead, refused by DynamoDB's clock in the same reply")

	require.NoError(t, st.Complete(ctx, completionAt(ref, now, idemstore.Response{StatusCode: 201, Body: "{}"}, time.Hour)))
	require.Equal(t, []string{"UpdateItem"}, w.take(), "the completion")

	res, err = st.Claim(ctx, dup)
	require.NoError(t, err)
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	require.Equal(t, "{}", res.Record.Response.Body)
	require.Equal(t, []string{"PutItem"}, w.take(), "a replay: one request, no read")

	stale := claimAt(newRef(), now.Add(-time.Hour), time.Minute, 2*time.Hour)
	_, err = st.Claim(ctx, stale)
	require.NoError(t, err)
	w.take()
	takeover := claimAt(idemstore.Ref{UserID: stale.UserID, Key: stale.Key, Owner: uuid.NewString()}, now, time.Minute, time.Hour)
	res, err = st.Claim(ctx, takeover)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.Equal(t, []string{"PutItem", "PutItem"}, w.take(), "a takeover: the failed write, then the conditioned one")

	require.NoError(t, st.Release(ctx, takeover.Ref))
	require.Equal(t, []string{"DeleteItem"}, w.take(), "a release")
}

// TestServerClockFromDate: DynamoDB's clock, which the store reads from
// the Date header of the failed write's reply, decides a takeover together
// with the caller's. With the server's replies dated an hour behind, a
// caller whose lease ended half an hour ago by its own clock does not take
// over; with no Date at all, the process's clock stands in.
func TestServerClockFromDate(t *testing.T) {
	t.Parallel()
	st, w, _ := wiredStore(t, nil)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	first := claimAt(newRef(), now.Add(-time.Hour), 30*time.Minute, 24*time.Hour)
	_, err := st.Claim(ctx, first)
	require.NoError(t, err)
	next := claimAt(idemstore.Ref{UserID: first.UserID, Key: first.Key, Owner: uuid.NewString()}, now, time.Minute, 24*time.Hour)

	w.setRewrite(func(_ string, resp *http.Response) {
		resp.Header.Set("Date", time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat))
	})
	res, err := st.Claim(ctx, next)
	require.NoError(t, err)
	require.False(t, res.Claimed, "by DynamoDB's clock the lease is live for ten more minutes")
	require.Equal(t, first.Owner, res.Record.Owner)

	w.setRewrite(func(_ string, resp *http.Response) { resp.Header.Del("Date") })
	res, err = st.Claim(ctx, next)
	require.NoError(t, err)
	require.True(t, res.Claimed, "without a Date the process's clock stands in, and the lease ran out by it")
}

// TestWithoutOldItem: a server that does not answer a failed condition with
// the item (ReturnValuesOnConditionCheckFailure ignored) costs the claim a
// strongly consistent read, and nothing else changes.
func TestWithoutOldItem(t *testing.T) {
	t.Parallel()
	st, w, _ := wiredStore(t, nil)
	ctx := context.Background()
	now := time.Now()
	c := claimAt(newRef(), now, time.Minute, time.Hour)
	_, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, st.Complete(ctx, completionAt(c.Ref, now, idemstore.Response{StatusCode: 201, Body: "done"}, time.Hour)))
	w.take()

	w.setRewrite(func(op string, resp *http.Response) {
		if op == "PutItem" && resp.StatusCode == http.StatusBadRequest {
			editJSON(t, resp, func(body map[string]any) {
				require.Contains(t, body, "Item", "the server sent the old item")
				delete(body, "Item")
			})
		}
	})
	retry := c
	retry.Owner = uuid.NewString()
	res, err := st.Claim(ctx, retry)
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, "done", res.Record.Response.Body)
	require.Equal(t, []string{"PutItem", "GetItem"}, w.take())
}

// TestReplayByteForByte round-trips bodies and headers that are not
// valid UTF-8 (kept as Binary) beside those that are (kept as String).
func TestReplayByteForByte(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t, nil)
	ctx := context.Background()
	now := time.Now()
	for name, resp := range map[string]idemstore.Response{
		"json":                 {StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{ "b":1, "a" : [1.0, 2e3] }`},
		"empty":                {StatusCode: 204},
		"empty header value":   {StatusCode: 200, Headers: map[string]string{"X-Empty": ""}},
		"NUL bytes":            {StatusCode: 200, Body: "\x00a\x00\x00"},
		"invalid UTF-8":        {StatusCode: 200, Body: "\xff\xfe\xc3\x28"},
		"base64 flag":          {StatusCode: 200, Body: "AAEC", IsBase64Encoded: true},
		"header invalid UTF-8": {StatusCode: 200, Headers: map[string]string{"X-Raw": "\xff\x00", "Content-Type": "text/plain"}, Body: "x"},
		"negative status":      {StatusCode: -1},
	} {
		c := claimAt(newRef(), now, time.Minute, time.Hour)
		_, err := st.Claim(ctx, c)
		require.NoError(t, err, name)
		require.NoError(t, st.Complete(ctx, completionAt(c.Ref, now, resp, time.Hour)), name)
		other := c
		other.Owner = uuid.NewString()
		res, err := st.Claim(ctx, other)
		require.NoError(t, err, name)
		require.NotNil(t, res.Record.Response, name)
		got := *res.Record.Response
		if len(resp.Headers) == 0 {
			resp.Headers = nil
		}
		require.Equal(t, resp, got, name)
	}
}

// TestEveryResponseFieldRoundTrips fills every field of idemstore.Response
// (found by reflection, so that a field added later is covered without
// editing this test) and checks that a replay returns each.
func TestEveryResponseFieldRoundTrips(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t, nil)
	ctx := context.Background()
	var resp idemstore.Response
	v := reflect.ValueOf(&resp).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("value of " + v.Type().Field(i).Name + " \xff")
		case reflect.Int:
			f.SetInt(299)
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"X-A": "1", "X-B": "\x00"}))
		case reflect.Pointer:
			if f.Type() != reflect.TypeFor[*idemstore.Origin]() {
				t.Fatalf("StoredResponse.%s is a %s: teach the store (and this test) to keep it", v.Type().Field(i).Name, f.Type())
			}
			f.Set(reflect.ValueOf(&idemstore.Origin{TraceID: "trace \xff", SpanID: "span", At: time.UnixMicro(1893553445678901).UTC()}))
		default:
			t.Fatalf("StoredResponse.%s is a %s: teach the store (and this test) to keep it", v.Type().Field(i).Name, f.Kind())
		}
	}
	now := time.Now()
	c := claimAt(newRef(), now, time.Minute, time.Hour)
	_, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, st.Complete(ctx, completionAt(c.Ref, now, resp, time.Hour)))
	other := c
	other.Owner = uuid.NewString()
	res, err := st.Claim(ctx, other)
	require.NoError(t, err)
	require.NotNil(t, res.Record.Response)
	require.Equal(t, resp, *res.Record.Response)
}

// TestStoppedServer: every call on a server that has gone is a idemstore.Error.
func TestStoppedServer(t *testing.T) {
	t.Parallel()
	srv := dynamotest.StartT(t)
	client := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{MaxAttempts: 1})
	st, err := dynamostore.New(client, nil)
	require.NoError(t, err)
	ctx := context.Background()
	// The table goes with the server: no cleanup of its own.
	_, err = client.CreateTable(ctx, st.CreateTableInput())
	require.NoError(t, err)
	c := claimAt(newRef(), time.Now(), 30*time.Second, time.Hour)
	res, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.True(t, res.Claimed)

	srv.Stop()
	_, err = st.Claim(ctx, c)
	requireStoreError(t, err, "claim")
	requireStoreError(t, st.Complete(ctx, completionAt(c.Ref, c.Now, idemstore.Response{StatusCode: 201}, time.Hour)), "complete")
	requireStoreError(t, st.Release(ctx, c.Ref), "release")
}

func TestDeadlineIsStoreError(t *testing.T) {
	t.Parallel()
	st, _ := newStore(t, nil)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err := st.Claim(ctx, claimAt(newRef(), time.Now(), time.Second, time.Hour))
	requireStoreError(t, err, "claim")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestForeignItemIsStoreError: an item under a record's key that is not a
// record fails every call as a store error that says so, and is left
// alone.
func TestForeignItemIsStoreError(t *testing.T) {
	t.Parallel()
	st, client := newStore(t, nil)
	ctx := context.Background()
	c := claimAt(newRef(), time.Now(), time.Minute, time.Hour)
	foreign := st.Key(c.UserID, c.Key)
	foreign["owner"] = strAttr("someone")
	foreign["status"] = strAttr("in_progress")
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(st.Table()), Item: foreign})
	require.NoError(t, err)

	_, err = st.Claim(ctx, c)
	se := requireStoreError(t, err, "claim")
	require.Contains(t, se.Error(), "not a record")
	require.Equal(t, foreign, getItem(t, client, st, c.Ref), "left alone")
}

func TestNewRejectsSharedNames(t *testing.T) {
	t.Parallel()
	_, err := dynamostore.New(dynamotest.NewClientAt("http://127.0.0.1:1", dynamotest.ClientOptions{}), &dynamostore.Options{
		Names: dynamostore.AttributeNames{Owner: "status"},
	})
	require.ErrorContains(t, err, "Options.Names.Status and Options.Names.Owner")
	_, err = dynamostore.New(nil, nil)
	require.Error(t, err)
}
