package dynamostore_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/dynamotest"
	"github.com/ichido/ichido/internal/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

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
func storeOn(client *dynamodb.Client, table string) func(t *testing.T) idempotency.Store {
	return func(t *testing.T) idempotency.Store {
		st, err := dynamostore.New(client, &dynamostore.Options{Table: table})
		require.NoError(t, err)
		return st
	}
}

// newBrokenStore returns a store whose client points at a port nothing
// listens on, and does not retry.
func newBrokenStore(t *testing.T) idempotency.Store {
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
	storetest.RunWithOptions(t, storeOn(client, table), storetest.Options{NewBrokenStore: newBrokenStore})
}

