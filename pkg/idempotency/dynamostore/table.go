package dynamostore

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// CreateTableInput is the table the store expects, for a program or a test that
// creates it through the API. The stack's template declares the same table. It
// has the key schema of Options.Names, on-demand capacity, and server-side
// encryption with DynamoDB's default key. Time to Live is a separate call,
// TimeToLiveInput, once the table is active.
func (s *Store) CreateTableInput() *dynamodb.CreateTableInput {
	in := &dynamodb.CreateTableInput{
		TableName:   s.table,
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(s.names.PartitionKey), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(s.names.PartitionKey), KeyType: types.KeyTypeHash},
		},
		SSESpecification: &types.SSESpecification{Enabled: aws.Bool(true)},
	}
	if s.names.SortKey != "" {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(s.names.SortKey), AttributeType: types.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(s.names.SortKey), KeyType: types.KeyTypeRange})
	}
	return in
}

// TimeToLiveInput turns on the table's Time to Live on the TTL attribute.
func (s *Store) TimeToLiveInput() *dynamodb.UpdateTimeToLiveInput {
	return &dynamodb.UpdateTimeToLiveInput{
		TableName: s.table,
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(s.names.TTL),
			Enabled:       aws.Bool(true),
		},
	}
}

// Check implements idemstore.Checker with one DescribeTable. It shows before
// the first request that the table exists and that the function may describe
// it. A role without the store's grants usually lacks this one too. It also
// shows that the key schema is the one Options.Names give. It changes nothing.
// A fault is a *idemstore.Error of op "check", permanent when it is one of
// configuration.
func (s *Store) Check(ctx context.Context) error {
	out, err := s.client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: s.table})
	if err != nil {
		return s.storeError(ctx, "check", err)
	}
	if err := s.checkSchema(out.Table); err != nil {
		return newStoreError("check", err, true)
	}
	return nil
}

// errSchema marks a table whose key schema is not the store's.
var errSchema = errors.New("the table's key schema does not match the store's attribute names")

func (s *Store) checkSchema(t *types.TableDescription) error {
	if t == nil {
		return fmt.Errorf("table %s: DescribeTable returned no description", s.Table())
	}
	if t.TableStatus == types.TableStatusDeleting || t.TableStatus == types.TableStatusArchived || t.TableStatus == types.TableStatusInaccessibleEncryptionCredentials {
		return fmt.Errorf("table %s is %s", s.Table(), t.TableStatus)
	}
	defs := map[string]types.ScalarAttributeType{}
	for _, d := range t.AttributeDefinitions {
		defs[aws.ToString(d.AttributeName)] = d.AttributeType
	}
	var hash, rang string
	for _, k := range t.KeySchema {
		switch k.KeyType {
		case types.KeyTypeHash:
			hash = aws.ToString(k.AttributeName)
		case types.KeyTypeRange:
			rang = aws.ToString(k.AttributeName)
		}
	}
	want := func(what, got, name string) error {
		if got != name {
			return fmt.Errorf("%w: table %s has %s %q, Options.Names say %q", errSchema, s.Table(), what, got, name)
		}
		if name != "" && defs[name] != types.ScalarAttributeTypeS {
			return fmt.Errorf("%w: table %s: %s %q is of type %s, not a String", errSchema, s.Table(), what, name, defs[name])
		}
		return nil
	}
	if err := want("partition key", hash, s.names.PartitionKey); err != nil {
		return err
	}
	return want("sort key", rang, s.names.SortKey)
}
