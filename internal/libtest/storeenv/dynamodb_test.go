package storeenv_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/storeenv"
)

// TestOpenDynamoDB: IDEMPOTENCY_STORE=dynamodb builds the store on
// IDEMPOTENCY_TABLE, with Options.DynamoDB's names and prefix, through the
// AWS SDK's own endpoint and credential settings. Not parallel: those are
// read from the process's environment.
func TestOpenDynamoDB(t *testing.T) {
	srv := dynamotest.StartT(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	ctx := context.Background()
	client := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{})
	layout, err := dynamostore.New(client, &dynamostore.Options{Table: "keys"})
	require.NoError(t, err)
	_, err = client.CreateTable(ctx, layout.CreateTableInput())
	require.NoError(t, err)

	store, closeStore, err := storeenv.Open(ctx, env(map[string]string{
		"IDEMPOTENCY_STORE": "dynamodb", "IDEMPOTENCY_TABLE": "keys", "AWS_REGION": dynamotest.Region,
	}), &storeenv.Options{DynamoDB: &dynamostore.Options{Table: "ignored", KeyPrefix: "storeenv:"}})
	require.NoError(t, err)
	defer closeStore()
	st, ok := store.(*dynamostore.Store)
	require.True(t, ok, "a %T", store)
	require.Equal(t, "keys", st.Table(), "the table is the environment's")
	replays(t, store)

	items, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String("keys")})
	require.NoError(t, err)
	require.Len(t, items.Items, 1)
	pk, ok := items.Items[0]["id"].(*types.AttributeValueMemberS)
	require.True(t, ok)
	require.True(t, strings.HasPrefix(pk.Value, "storeenv:"), "the key prefix of Options.DynamoDB: %q", pk.Value)
}
