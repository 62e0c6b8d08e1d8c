package taskfn

import (
	"context"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
)

// TestBuildDynamoDBStore: with IDEMPOTENCY_STORE=dynamodb the keys live in
// the DynamoDB table IDEMPOTENCY_TABLE, not in the database, and the
// decorator behaves the same. Not parallel: the AWS SDK reads its endpoint
// and credentials from the process's environment.
func TestBuildDynamoDBStore(t *testing.T) {
	db := apptest.New(t)
	srv := dynamotest.StartT(t)
	client := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{})
	st, err := dynamostore.New(client, &dynamostore.Options{Table: "keys"})
	require.NoError(t, err)
	_, err = client.CreateTable(context.Background(), st.CreateTableInput())
	require.NoError(t, err)

	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", srv.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	f, err := build(context.Background(), urlEnv(db.URL, map[string]string{
		"IDEMPOTENCY_STORE": "dynamodb", "IDEMPOTENCY_TABLE": "keys", "AWS_REGION": dynamotest.Region,
	}), io.Discard)
	require.NoError(t, err)
	defer f.Close()

	first := invoke(t, f, CreateTaskFunction, event(t, "create-task.json"))
	require.Equal(t, 201, first.StatusCode, first.Body)
	replay := invoke(t, f, CreateTaskFunction, event(t, "create-task-replay.json"))
	require.Equal(t, "true", replay.Headers["Idempotent-Replayed"])
	require.Equal(t, first.Body, replay.Body)
	mismatch := invoke(t, f, CreateTaskFunction, event(t, "create-task-mismatch.json"))
	require.Equal(t, 422, mismatch.StatusCode)

	var inPostgres int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&inPostgres))
	require.Zero(t, inPostgres, "the keys are kept in DynamoDB")
	items, err := client.Scan(context.Background(), &dynamodb.ScanInput{TableName: aws.String("keys")})
	require.NoError(t, err)
	require.Len(t, items.Items, 1)
}
