package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// AdminAPI is what the operator's calls (Get, List, Delete) need of the client
// beyond API. List scans the table, or queries one user's records when the
// table has a sort key. *dynamodb.Client implements it. The functions' role
// needs none of it; an operator's does (dynamodb:GetItem, DeleteItem, Scan and
// Query on the table).
type AdminAPI interface {
	API
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
}

var _ idemstore.Admin = (*Store)(nil)

// Get implements idemstore.Admin: one strongly consistent GetItem. A
// record past its ExpiresAt by DynamoDB's clock (the reply's Date) counts
// as absent, whether or not TTL has deleted it.
func (s *Store) Get(ctx context.Context, userID, key string) (idemstore.Record, bool, error) {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return idemstore.Record{}, false, s.storeError(ctx, "get", err)
	}
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{TableName: s.table, Key: s.Key(userID, key), ConsistentRead: aws.Bool(true)})
	received := time.Now()
	if err != nil {
		return idemstore.Record{}, false, s.storeError(ctx, "get", err)
	}
	if out.Item == nil {
		return idemstore.Record{}, false, nil
	}
	rec, err := s.decodeItem(userID, key, out.Item)
	if err != nil {
		return idemstore.Record{}, false, s.storeError(ctx, "get", err)
	}
	now := time.Now()
	if d, ok := awsmiddleware.GetServerTime(out.ResultMetadata); ok {
		now = d.Add(time.Since(received))
	}
	if !rec.ExpiresAt.After(now) {
		return idemstore.Record{}, false, nil
	}
	return rec, true, nil
}

// List implements idemstore.Admin with a strongly consistent Scan of the
// records under Options.KeyPrefix (q.UserID's when set). When the table has a
// sort key, it makes a Query of one user's records. It returns them newest
// first, at most q.Limited(). It reads every record it selects: for operators,
// not for a request's path. The client must implement AdminAPI.
//
// Only the store's own records are listed. An item is skipped when its key is
// not exactly KeyPrefix and the ids, such as another store's prefix or a
// Powertools record. It is skipped too when its attributes are not a record.
func (s *Store) List(ctx context.Context, q idemstore.ListQuery) ([]idemstore.Record, error) {
	admin, ok := s.client.(AdminAPI)
	if !ok {
		return nil, newStoreError("list", fmt.Errorf("the client (%T) cannot Scan or Query: List needs a client with both, such as *dynamodb.Client", s.client), true)
	}
	if q.UserID != "" && !idemstore.IsID(q.UserID) {
		return nil, s.storeError(ctx, "list", fmt.Errorf("the user id %.80q is %w", q.UserID, idemstore.ErrNotID))
	}
	n := s.names
	names := map[string]string{}
	values := map[string]types.AttributeValue{}
	var filters []string
	if q.Status != "" {
		names["#st"] = n.Status
		values[":st"] = str(string(q.Status))
		filters = append(filters, "#st = :st")
	}
	var items []map[string]types.AttributeValue
	if q.UserID != "" && n.SortKey != "" {
		names["#pk"] = n.PartitionKey
		values[":pk"] = str(s.prefix + q.UserID)
		in := &dynamodb.QueryInput{TableName: s.table, ConsistentRead: aws.Bool(true), KeyConditionExpression: aws.String("#pk = :pk"),
			ExpressionAttributeNames: names, ExpressionAttributeValues: values}
		if len(filters) > 0 {
			in.FilterExpression = aws.String(strings.Join(filters, " AND "))
		}
		for p := dynamodb.NewQueryPaginator(admin, in); p.HasMorePages(); {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, s.storeError(ctx, "list", err)
			}
			items = append(items, out.Items...)
		}
	} else {
		if begins := s.listPrefix(q.UserID); begins != "" {
			names["#pk"] = n.PartitionKey
			values[":begins"] = str(begins)
			filters = append(filters, "begins_with(#pk, :begins)")
		}
		in := &dynamodb.ScanInput{TableName: s.table, ConsistentRead: aws.Bool(true)}
		if len(filters) > 0 {
			in.FilterExpression = aws.String(strings.Join(filters, " AND "))
			in.ExpressionAttributeNames, in.ExpressionAttributeValues = names, values
		}
		for p := dynamodb.NewScanPaginator(admin, in); p.HasMorePages(); {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, s.storeError(ctx, "list", err)
			}
			items = append(items, out.Items...)
		}
	}
	now := time.Now()
	recs := make([]idemstore.Record, 0, len(items))
	for _, item := range items {
		userID, key, ok := s.refOf(item)
		if !ok {
			continue // another store's item, or another program's
		}
		rec, err := s.decodeItem(userID, key, item)
		switch {
		case errors.Is(err, errNotRecord):
			continue // under this store's key, but not a record
		case err != nil:
			return nil, s.storeError(ctx, "list", err)
		}
		if rec.ExpiresAt.After(now) {
			recs = append(recs, rec)
		}
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].CreatedAt.After(recs[j].CreatedAt) })
	if limit := q.Limited(); len(recs) > limit {
		recs = recs[:limit]
	}
	return recs, nil
}

// listPrefix is what the partition keys that List selects start with: a
// filter that spares returning most other items, not the boundary, which
// refOf draws.
func (s *Store) listPrefix(userID string) string {
	switch {
	case userID == "":
		return s.prefix
	case s.names.SortKey != "":
		return s.prefix + userID
	default:
		return s.prefix + userID + "#"
	}
}

// refOf reads the user id and the key out of an item's primary key, and
// reports whether the item is this store's: its partition key is KeyPrefix
// exactly, then a user id, "#" and a key (or a user id alone, with the key
// in the sort key), each a lower-case UUID. Since the ids have a fixed
// length, what precedes them is the prefix of the store that wrote the
// item, so an item of a prefix that merely starts with this one is not
// this store's.
func (s *Store) refOf(item map[string]types.AttributeValue) (userID, key string, ok bool) {
	pk, err := stringOf(item, s.names.PartitionKey)
	if err != nil {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(pk, s.prefix)
	if !ok {
		return "", "", false
	}
	if s.names.SortKey != "" {
		key, err := stringOf(item, s.names.SortKey)
		return rest, key, err == nil && idemstore.IsID(rest) && idemstore.IsID(key)
	}
	userID, key, ok = strings.Cut(rest, "#")
	return userID, key, ok && idemstore.IsID(userID) && idemstore.IsID(key)
}

// Delete implements idemstore.Admin: one DeleteItem, whatever the
// record's state or owner, reporting whether there was one.
func (s *Store) Delete(ctx context.Context, userID, key string) (bool, error) {
	if err := idemstore.CheckIDs(userID, key); err != nil {
		return false, s.storeError(ctx, "delete", err)
	}
	out, err := s.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: s.table, Key: s.Key(userID, key), ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return false, s.storeError(ctx, "delete", err)
	}
	return len(out.Attributes) > 0, nil
}
