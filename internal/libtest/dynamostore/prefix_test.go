package dynamostore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// TestListSkipsForeignItems shares one table between stores on the
// prefixes "svc-…", "svc-…2" and none, and items that are not theirs:
// Powertools records (completed and in progress, as its DynamoDB layer
// writes them), an item under a store's prefix whose key is not a user and
// a key, and an item of a record's key that is not a record. Each store
// lists its own records and skips every other item.
func TestListSkipsForeignItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := dynamotest.NewClient(t)
	table := newTable(t, client, nil)
	stem := "svc-" + uuid.NewString()[:8]
	expiration := strconv.FormatInt(time.Now().Add(time.Hour).Unix(), 10)
	for _, item := range []map[string]types.AttributeValue{
		{"id": strAttr("orders-fn#abc"), "status": strAttr("COMPLETED"), "expiration": &types.AttributeValueMemberN{Value: expiration},
			"data": strAttr(`{"ok":true}`), "validation": strAttr("9e107d9d372bb6826bd81d3542a419d6")},
		{"id": strAttr("orders-fn.lambda_handler#e4d909c290d0fb1ca068ffaddf22cbd0"), "status": strAttr("INPROGRESS"),
			"expiration": &types.AttributeValueMemberN{Value: expiration}, "in_progress_expiration": numAttr(time.Now().Add(time.Minute).UnixMilli())},
		{"id": strAttr(stem + "not-a-user#not-a-key"), "status": strAttr("in_progress")},
		{"id": strAttr(uuid.NewString() + "#" + uuid.NewString()), "status": strAttr("in_progress"), "owner": strAttr("someone")},
	} {
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: item})
		require.NoError(t, err)
	}

	now := time.Now()
	for _, prefix := range []string{"", stem, stem + "2"} {
		st, err := dynamostore.New(client, &dynamostore.Options{Table: table, KeyPrefix: prefix})
		require.NoError(t, err)
		running, done := newRef(), newRef()
		_, err = st.Claim(ctx, claimAt(running, now, time.Minute, time.Hour))
		require.NoError(t, err)
		_, err = st.Claim(ctx, claimAt(done, now, time.Minute, time.Hour))
		require.NoError(t, err)
		require.NoError(t, st.Complete(ctx, completionAt(done, now, idemstore.Response{StatusCode: 201}, time.Hour)))

		keys := func(q idemstore.ListQuery) []string {
			t.Helper()
			recs, err := st.List(ctx, q)
			require.NoError(t, err, "prefix %q, %+v", prefix, q)
			var out []string
			for _, r := range recs {
				out = append(out, r.Key)
			}
			return out
		}
		require.ElementsMatch(t, []string{running.Key, done.Key}, keys(idemstore.ListQuery{}), "prefix %q", prefix)
		require.Equal(t, []string{running.Key}, keys(idemstore.ListQuery{Status: idemstore.StatusInProgress}), "prefix %q", prefix)
		require.Equal(t, []string{done.Key}, keys(idemstore.ListQuery{Status: idemstore.StatusCompleted}), "prefix %q", prefix)
		require.NoError(t, st.Release(ctx, running))
		deleted, err := st.Delete(ctx, done.UserID, done.Key)
		require.NoError(t, err)
		require.True(t, deleted)
	}
}

// TestIDsMustBeUUIDs: the ids are what makes the prefix a boundary, so a
// call with an id that is not a lower-case UUID is refused, as a
// permanent store error, before anything is sent.
func TestIDsMustBeUUIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := dynamostore.New(dynamotest.NewClientAt("http://127.0.0.1:1", dynamotest.ClientOptions{MaxAttempts: 1}), &dynamostore.Options{KeyPrefix: "svc"})
	require.NoError(t, err)
	good := uuid.NewString()
	for name, ref := range map[string]idemstore.Ref{
		"user with another prefix's rest": {UserID: "2" + good, Key: good, Owner: "o"},
		"user in upper case":              {UserID: "A" + good[1:], Key: good, Owner: "o"},
		"user empty":                      {UserID: "", Key: good, Owner: "o"},
		"key with a separator":            {UserID: good, Key: good + "#" + good, Owner: "o"},
		"key not a UUID":                  {UserID: good, Key: "abc", Owner: "o"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			_, err := st.Claim(ctx, claimAt(ref, now, time.Minute, time.Hour))
			requireRefused(t, err, "claim")
			requireRefused(t, st.Complete(ctx, completionAt(ref, now, idemstore.Response{StatusCode: 200}, time.Hour)), "complete")
			requireRefused(t, st.Release(ctx, ref), "release")
			requireRefused(t, st.Renew(ctx, idemstore.Renewal{Ref: ref, Now: now, LeaseUntil: now.Add(time.Minute)}), "renew")
			_, _, err = st.Get(ctx, ref.UserID, ref.Key)
			requireRefused(t, err, "get")
			_, err = st.Delete(ctx, ref.UserID, ref.Key)
			requireRefused(t, err, "delete")
			if ref.UserID != "" && ref.UserID != good {
				_, err = st.List(ctx, idemstore.ListQuery{UserID: ref.UserID})
				requireRefused(t, err, "list")
			}
		})
	}
}

// requireRefused checks that err is the permanent store error of op that
// refuses an id.
func requireRefused(t *testing.T, err error, op string) {
	t.Helper()
	se := requireStoreError(t, err, op)
	require.True(t, se.Permanent, "%v", err)
	require.ErrorContains(t, err, "not a lower-case UUID")
}
