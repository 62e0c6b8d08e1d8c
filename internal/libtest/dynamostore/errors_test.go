package dynamostore_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// replaceWithError makes resp the error reply DynamoDB sends for code: a
// JSON body naming the error's type.
func replaceWithError(resp *http.Response, status int, code string) {
	_ = resp.Body.Close()
	body := fmt.Sprintf(`{"__type":"com.amazon.coral.service#%s","message":"as DynamoDB says it"}`, code)
	resp.StatusCode = status
	resp.Status = strconv.Itoa(status) + " " + http.StatusText(status)
	resp.Body = io.NopCloser(strings.NewReader(body))
	resp.ContentLength = int64(len(body))
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	resp.Header.Del("X-Amz-Crc32")
	resp.Header.Del("X-Amzn-Errortype") // the test server's own, for the error it had
}

// TestErrorsPermanentOrTransient: DynamoDB's answers that no repetition
// cures (privileges, credentials, a missing table, a refused request) are
// permanent StoreErrors of every call; throttling and server failures are
// transient. The test server cannot be made to answer most of these, so
// its replies are replaced by the error replies DynamoDB documents.
func TestErrorsPermanentOrTransient(t *testing.T) {
	t.Parallel()
	plain := dynamotest.NewClient(t)
	table := newTable(t, plain, nil)
	for code, tc := range map[string]struct {
		status    int
		permanent bool
	}{
		"AccessDeniedException":                  {400, true},
		"UnrecognizedClientException":            {400, true},
		"InvalidSignatureException":              {400, true},
		"MissingAuthenticationTokenException":    {400, true},
		"ResourceNotFoundException":              {400, true},
		"ValidationException":                    {400, true},
		"ProvisionedThroughputExceededException": {400, false},
		"ThrottlingException":                    {400, false},
		"RequestLimitExceeded":                   {400, false},
		"InternalServerError":                    {500, false},
		"ServiceUnavailable":                     {503, false},
	} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			w := &wire{base: &http.Client{}}
			w.setRewrite(func(_ string, resp *http.Response) { replaceWithError(resp, tc.status, code) })
			client := dynamotest.NewClientAt(dynamotest.Endpoint(t), dynamotest.ClientOptions{MaxAttempts: 1, HTTPClient: w})
			st, err := dynamostore.New(client, &dynamostore.Options{Table: table})
			require.NoError(t, err)
			ctx := context.Background()
			now := time.Now()
			c := claimAt(newRef(), now, time.Minute, time.Hour)
			_, claimErr := st.Claim(ctx, c)
			for op, err := range map[string]error{
				"claim":    claimErr,
				"complete": st.Complete(ctx, completionAt(c.Ref, now, idemstore.Response{StatusCode: 200}, time.Hour)),
				"release":  st.Release(ctx, c.Ref),
				"renew":    st.Renew(ctx, idemstore.Renewal{Ref: c.Ref, Now: now, LeaseUntil: now.Add(time.Minute)}),
				"check":    st.Check(ctx),
			} {
				se := requireStoreError(t, err, op)
				require.Equal(t, tc.permanent, se.Permanent, "%s: %v", op, err)
				require.Contains(t, se.Error(), code)
			}
		})
	}
}

// TestMissingTable: every call on a table that does not exist is a
// permanent idemstore.Error whose message names the table and what makes it.
func TestMissingTable(t *testing.T) {
	t.Parallel()
	name := dynamotest.TableName(t)
	st, err := dynamostore.New(dynamotest.NewClient(t), &dynamostore.Options{Table: name})
	require.NoError(t, err)
	_, err = st.Claim(context.Background(), claimAt(newRef(), time.Now(), time.Minute, time.Hour))
	se := requireStoreError(t, err, "claim")
	require.True(t, se.Permanent)
	require.Contains(t, se.Error(), name)
	require.Contains(t, se.Error(), "IdempotencyStore=dynamodb")
	err = st.Check(context.Background())
	require.True(t, idemstore.IsPermanent(err), "%v", err)
	require.Contains(t, err.Error(), name)
}

// TestCheck: Check passes on the store's table and fails, permanently,
// on a table whose key schema is not the one the store's names give.
func TestCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, client := newStore(t, nil)
	require.NoError(t, st.Check(ctx))
	require.NoError(t, idempotency.CheckStore(ctx, st))

	other, err := dynamostore.New(client, &dynamostore.Options{Table: st.Table(), Names: ownNames})
	require.NoError(t, err)
	err = other.Check(ctx)
	require.True(t, idemstore.IsPermanent(err), "%v", err)
	require.ErrorContains(t, err, `partition key "id", Options.Names say "pk"`)

	sorted, err := dynamostore.New(client, &dynamostore.Options{Table: st.Table(), Names: dynamostore.AttributeNames{SortKey: "key"}})
	require.NoError(t, err)
	require.ErrorContains(t, sorted.Check(ctx), `sort key "", Options.Names say "key"`)

	numeric := dynamotest.CreateTable(t, client, &dynamodb.CreateTableInput{
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeN}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	onNumeric, err := dynamostore.New(client, &dynamostore.Options{Table: numeric})
	require.NoError(t, err)
	require.ErrorContains(t, onNumeric.Check(ctx), "not a String")
}

// TestTooLarge: a response whose item would pass DynamoDB's 400 KB is
// refused before anything is sent; one the server refuses for its size
// (the test server's limit, 405,000 bytes, is below DynamoDB's 409,600) is
// answered the same way. Either way nothing is written and the owner can
// complete with the not-kept marker.
func TestTooLarge(t *testing.T) {
	t.Parallel()
	st, w, _ := wiredStore(t, nil)
	ctx := context.Background()
	now := time.Now()
	for name, tc := range map[string]struct {
		body     int
		requests []string
	}{
		"over the limit, refused before sending": {dynamostore.MaxItemBytes, nil},
		"refused by the server":                  {406_000, []string{"UpdateItem"}},
	} {
		c := claimAt(newRef(), now, time.Minute, time.Hour)
		_, err := st.Claim(ctx, c)
		require.NoError(t, err)
		w.take()
		big := idemstore.Response{StatusCode: 200, Body: strings.Repeat("x", tc.body)}
		err = st.Complete(ctx, completionAt(c.Ref, now, big, time.Hour))
		require.ErrorIs(t, err, idemstore.ErrTooLarge, name)
		require.True(t, idemstore.IsPermanent(err), name)
		require.Equal(t, tc.requests, w.take(), name)

		other := c
		other.Owner = uuid.NewString()
		res, err := st.Claim(ctx, other)
		require.NoError(t, err)
		require.Equal(t, idemstore.StatusInProgress, res.Record.Status, "%s: nothing was written", name)
		require.NoError(t, st.Complete(ctx, completionAt(c.Ref, now, idemstore.Response{StatusCode: 200, NotKept: true}, time.Hour)), name)
	}

	// Just under the limit as DynamoDB counts it is kept.
	c := claimAt(newRef(), now, time.Minute, time.Hour)
	_, err := st.Claim(ctx, c)
	require.NoError(t, err)
	fits := idemstore.Response{StatusCode: 200, Body: strings.Repeat("y", 400_000)}
	require.NoError(t, st.Complete(ctx, completionAt(c.Ref, now, fits, time.Hour)))
	other := c
	other.Owner = uuid.NewString()
	res, err := st.Claim(ctx, other)
	require.NoError(t, err)
	require.Equal(t, fits.Body, res.Record.Response.Body)
}
