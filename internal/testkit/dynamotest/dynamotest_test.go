package dynamotest_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

// newTable creates a table keyed by the String "id".
func newTable(t *testing.T, c *dynamodb.Client) *string {
	t.Helper()
	name := dynamotest.CreateTable(t, c, &dynamodb.CreateTableInput{
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	return aws.String(name)
}

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := dynamotest.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)

	for _, e := range []string{srv.Endpoint, srv.MotoEndpoint} {
		host, _, err := net.SplitHostPort(e[len("http://"):])
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1", host)
	}
	c := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{})
	// The table goes with the server: no CreateTable cleanup.
	_, err = c.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("t"),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
	})
	require.NoError(t, err)
	_, err = c.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("t"), Item: map[string]types.AttributeValue{"id": s("a")}})
	require.NoError(t, err)
	require.Positive(t, srv.Requests(), "the front counts what it passes on")

	srv.Stop()
	srv.Stop() // a second stop does nothing
	_, err = os.Stat(srv.Dir)
	require.True(t, os.IsNotExist(err), "the server's directory is removed")
	d := net.Dialer{Timeout: time.Second}
	for _, addr := range []string{srv.Addr(), srv.MotoEndpoint[len("http://"):]} {
		_, err = d.Dial("tcp", addr)
		require.Error(t, err, "nothing listens on %s after Stop", addr)
	}
}

func TestSharedServer(t *testing.T) {
	t.Parallel()
	require.Equal(t, dynamotest.Endpoint(t), dynamotest.Endpoint(t), "one server per binary")
	a, b := dynamotest.NewClient(t), dynamotest.NewClient(t)
	table := newTable(t, a)
	ctx := context.Background()
	_, err := a.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: map[string]types.AttributeValue{"id": s("shared")}})
	require.NoError(t, err)
	out, err := b.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: map[string]types.AttributeValue{"id": s("shared")}, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.NotNil(t, out.Item)
}

func TestEndpointHonoursEnvironment(t *testing.T) {
	// Not parallel: it sets an environment variable.
	t.Setenv(dynamotest.EnvEndpoint, "http://127.0.0.1:1")
	require.Equal(t, "http://127.0.0.1:1", dynamotest.Endpoint(t))
}

func TestMissingServerSaysHowToInstall(t *testing.T) {
	// Not parallel: it sets an environment variable.
	t.Setenv(dynamotest.EnvBin, "/nonexistent/moto_server")
	_, err := dynamotest.Start(context.Background())
	require.ErrorIs(t, err, dynamotest.ErrMissing)
	require.Contains(t, err.Error(), dynamotest.EnvBin)
}

func TestTableNames(t *testing.T) {
	t.Parallel()
	a, b := dynamotest.TableName(t), dynamotest.TableName(t)
	require.NotEqual(t, a, b)
	require.Regexp(t, `^[A-Za-z0-9_.-]{3,255}$`, a)
}

// TestServerHonoursConditionalWrites checks, on the server the tests use,
// the parts of DynamoDB's documented behaviour that the store relies on:
// a failed condition is ConditionalCheckFailedException and changes
// nothing; with ReturnValuesOnConditionCheckFailure ALL_OLD it carries the
// item as it was (PutItem, UpdateItem and DeleteItem alike), and without
// an item there is none to carry; attribute_not_exists, AND, OR and
// equality on numbers and strings evaluate as documented; every reply has
// a Date header (the store's reading of DynamoDB's clock).
func TestServerHonoursConditionalWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := dynamotest.NewClient(t)
	table := newTable(t, c)
	key := map[string]types.AttributeValue{"id": s("k")}
	old := map[string]types.AttributeValue{"id": s("k"), "owner": s("a"), "lease": n("100"), "st": s("p")}
	names := map[string]string{"#id": "id"}

	// attribute_not_exists on a free key: written.
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: old, ConditionExpression: aws.String("attribute_not_exists(#id)"), ExpressionAttributeNames: names})
	require.NoError(t, err)

	requireFailedWith := func(t *testing.T, err error, want map[string]types.AttributeValue) {
		t.Helper()
		var failed *types.ConditionalCheckFailedException
		require.ErrorAs(t, err, &failed)
		require.Equal(t, want, failed.Item)
	}
	newer := map[string]types.AttributeValue{"id": s("k"), "owner": s("b"), "lease": n("200"), "st": s("p")}
	put := func(cond string, values map[string]types.AttributeValue, rv types.ReturnValuesOnConditionCheckFailure) error {
		names := map[string]string{"#id": "id"}
		if values != nil {
			names["#st"], names["#lease"] = "st", "lease"
		}
		_, err := c.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: newer, ConditionExpression: aws.String(cond),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values, ReturnValuesOnConditionCheckFailure: rv})
		return err
	}

	// On an existing item, ALL_OLD answers with the item; NONE does not.
	requireFailedWith(t, put("attribute_not_exists(#id)", nil, types.ReturnValuesOnConditionCheckFailureAllOld), old)
	requireFailedWith(t, put("attribute_not_exists(#id)", nil, types.ReturnValuesOnConditionCheckFailureNone), nil)

	// OR, AND and equality on a number and a string: a pinned value that
	// differs fails, the same values pass.
	pinned := "attribute_not_exists(#id) OR (#st = :st AND #lease = :lease)"
	requireFailedWith(t, put(pinned, map[string]types.AttributeValue{":st": s("p"), ":lease": n("101")}, types.ReturnValuesOnConditionCheckFailureAllOld), old)
	requireFailedWith(t, put(pinned, map[string]types.AttributeValue{":st": s("c"), ":lease": n("100")}, types.ReturnValuesOnConditionCheckFailureAllOld), old)
	// A number compares by value, not by its text.
	require.NoError(t, put(pinned, map[string]types.AttributeValue{":st": s("p"), ":lease": n("100.0")}, types.ReturnValuesOnConditionCheckFailureAllOld))
	got, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.Equal(t, newer, got.Item, "the conditional write replaced the item")

	// UpdateItem and DeleteItem answer a failed condition with the item
	// too, and change nothing.
	fence := map[string]types.AttributeValue{":o": s("a"), ":p": s("p")}
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: table, Key: key,
		UpdateExpression: aws.String("SET #st = :c REMOVE #lease"), ConditionExpression: aws.String("#o = :o AND #st = :p"),
		ExpressionAttributeNames:            map[string]string{"#o": "owner", "#st": "st", "#lease": "lease"},
		ExpressionAttributeValues:           map[string]types.AttributeValue{":o": s("a"), ":p": s("p"), ":c": s("c")},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	requireFailedWith(t, err, newer)
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: table, Key: key,
		ConditionExpression: aws.String("#o = :o AND #st = :p"), ExpressionAttributeNames: map[string]string{"#o": "owner", "#st": "st"},
		ExpressionAttributeValues: fence, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	requireFailedWith(t, err, newer)

	// The owner's fenced update applies: SET and REMOVE.
	_, err = c.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: table, Key: key,
		UpdateExpression: aws.String("SET #st = :c REMOVE #lease"), ConditionExpression: aws.String("#o = :o AND #st = :p"),
		ExpressionAttributeNames:  map[string]string{"#o": "owner", "#st": "st", "#lease": "lease"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":o": s("b"), ":p": s("p"), ":c": s("c")}})
	require.NoError(t, err)
	got, err = c.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
	require.NoError(t, err)
	require.Equal(t, map[string]types.AttributeValue{"id": s("k"), "owner": s("b"), "st": s("c")}, got.Item)

	// A condition on an item that is not there fails with no item to
	// return, even with ALL_OLD.
	_, err = c.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: table, Key: map[string]types.AttributeValue{"id": s("absent")},
		ConditionExpression: aws.String("#o = :o AND #st = :p"), ExpressionAttributeNames: map[string]string{"#o": "owner", "#st": "st"},
		ExpressionAttributeValues: fence, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	requireFailedWith(t, err, nil)
}

// TestReplyHasDate: the server dates its replies (RFC 9110's Date header),
// close to this machine's clock.
func TestReplyHasDate(t *testing.T) {
	t.Parallel()
	req, err := http.NewRequest(http.MethodPost, dynamotest.Endpoint(t), nil)
	require.NoError(t, err)
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	before := time.Now().Truncate(time.Second)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	require.NoError(t, err, "Date: %q", resp.Header.Get("Date"))
	require.False(t, date.Before(before), "Date %s is before the request (%s)", date, before)
	require.False(t, date.After(time.Now()), "Date %s is after the reply", date)
}

// TestConditionalWritesRaceOneWinner: through the front, conditional
// writes of one key that arrive together have exactly one winner, as on
// DynamoDB.
func TestConditionalWritesRaceOneWinner(t *testing.T) {
	t.Parallel()
	c := dynamotest.NewClient(t)
	table := newTable(t, c)
	const racers = 32
	for range 5 {
		id := uuid.NewString()
		var wg sync.WaitGroup
		wins := make([]bool, racers)
		errs := make([]error, racers)
		start := make(chan struct{})
		for i := range racers {
			wg.Go(func() {
				<-start
				_, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: table,
					Item:                map[string]types.AttributeValue{"id": s(id), "racer": n(string(rune('0' + i%10)))},
					ConditionExpression: aws.String("attribute_not_exists(id)")})
				var failed *types.ConditionalCheckFailedException
				switch {
				case err == nil:
					wins[i] = true
				case !errors.As(err, &failed):
					errs[i] = err
				}
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, errors.Join(errs...))
		won := 0
		for _, w := range wins {
			if w {
				won++
			}
		}
		require.Equal(t, 1, won, "racing writes of key %s", id)
	}
}

// TestConsumedCapacityIsReported: asked for, the server reports consumed
// capacity on a successful write. (moto reports a fixed figure, not
// DynamoDB's per-size one; the bench computes the latter from the item
// sizes.)
func TestConsumedCapacityIsReported(t *testing.T) {
	t.Parallel()
	c := dynamotest.NewClient(t)
	table := newTable(t, c)
	out, err := c.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: table,
		Item: map[string]types.AttributeValue{"id": s("x")}, ReturnConsumedCapacity: types.ReturnConsumedCapacityTotal})
	require.NoError(t, err)
	require.NotNil(t, out.ConsumedCapacity)
	require.Positive(t, aws.ToFloat64(out.ConsumedCapacity.CapacityUnits))
}

func TestVersion(t *testing.T) {
	t.Parallel()
	v, err := dynamotest.Version()
	require.NoError(t, err)
	require.Regexp(t, `^5\.`, v, "moto 5 is what the tests were written against")
}
