package taskfn

import (
	"context"
	"fmt"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
)

// dynamoStore returns the DynamoDB store on c's table, through the AWS
// SDK's default credentials (the function's role on Lambda) and endpoint
// (AWS_ENDPOINT_URL_DYNAMODB when set, for a local server). It does not
// call DynamoDB: the first request does, and the decorator answers 503
// (500 for a missing table or grant) while it cannot.
func dynamoStore(ctx context.Context, c dynamoConfig) (*dynamostore.Store, error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(c.region))
	if err != nil {
		return nil, fmt.Errorf("taskfn: the AWS SDK's settings for DynamoDB: %w", err)
	}
	st, err := dynamostore.New(dynamodb.NewFromConfig(cfg), &dynamostore.Options{Table: c.table})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return st, nil
}
