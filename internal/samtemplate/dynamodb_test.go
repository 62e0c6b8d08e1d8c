package samtemplate_test

import (
	"sort"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
)

// The functions whose handlers claim idempotency keys; only they may use
// the key table.
var claimingFunctions = []string{"CreateTaskFunction", "DeleteTaskFunction", "TaskActivityFunction", "UpdateTaskFunction"}

// tableActions are the calls package dynamostore makes.
var tableActions = []any{"dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:DeleteItem", "dynamodb:GetItem", "dynamodb:DescribeTable"}

// The DynamoDB table exists only when IdempotencyStore=dynamodb, and then
// it is the store's table (its key schema and TTL attribute), on demand and
// encrypted; the private subnets reach it through a gateway endpoint that
// reaches nothing else; and only the functions that claim keys may make
// the store's calls on it.
func TestDynamoDBIsOptional(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, p map[string]string) {
		tables := tpl.ResourceIDs("AWS::DynamoDB::Table")
		var endpoints []string
		for _, id := range tpl.ResourceIDs("AWS::EC2::VPCEndpoint") {
			if name, _ := tpl.Resources[id].Properties["ServiceName"].(map[string]any); str(name["Fn::Sub"]) == "com.amazonaws.${AWS::Region}.dynamodb" {
				endpoints = append(endpoints, id)
			}
		}
		if p["IdempotencyStore"] != "dynamodb" {
			require.Empty(t, tables)
			require.Empty(t, endpoints, "no DynamoDB endpoint")
			for _, id := range tpl.ResourceIDs("AWS::EC2::SecurityGroupEgress") {
				r := tpl.Resources[id].Properties
				require.False(t, ref(r["GroupId"]) == "FunctionSecurityGroup" && r["FromPort"] == int64(443), "%s: no HTTPS out of the functions' group", id)
			}
			for _, fn := range tpl.Functions() {
				require.Equal(t, "", fn.EnvironmentRaw["IDEMPOTENCY_TABLE"], fn.LogicalID)
				require.NotContains(t, policyRefs(fn), "IdempotencyTablePolicy", fn.LogicalID)
			}
			return
		}

		require.Len(t, tables, 1)
		table := tpl.Resources[tables[0]]
		props := table.Properties
		require.Equal(t, "PAY_PER_REQUEST", props["BillingMode"])
		require.Equal(t, map[string]any{"SSEEnabled": true}, props["SSESpecification"])
		st, err := dynamostore.New(dynamodb.New(dynamodb.Options{}), nil)
		require.NoError(t, err)
		want := st.CreateTableInput()
		require.Equal(t, []any{map[string]any{"AttributeName": aws.ToString(want.KeySchema[0].AttributeName), "KeyType": "HASH"}}, props["KeySchema"],
			"the key schema of the store's default layout")
		require.Equal(t, []any{map[string]any{"AttributeName": aws.ToString(want.AttributeDefinitions[0].AttributeName), "AttributeType": "S"}}, props["AttributeDefinitions"])
		require.Equal(t, map[string]any{"AttributeName": dynamostore.DefaultAttributeNames.TTL, "Enabled": true}, props["TimeToLiveSpecification"],
			"TTL on the store's TTL attribute")
		require.Equal(t, "Delete", table.Raw["DeletionPolicy"])

		for _, fn := range tpl.Functions() {
			require.Equal(t, "dynamodb", fn.Environment["IDEMPOTENCY_STORE"], fn.LogicalID)
			require.Equal(t, map[string]any{"Ref": tables[0]}, fn.EnvironmentRaw["IDEMPOTENCY_TABLE"], fn.LogicalID)
		}

		// The gateway endpoint: on the subnets' route table, reaching the
		// table alone.
		require.Len(t, endpoints, 1)
		ep := tpl.Resources[endpoints[0]].Properties
		require.Equal(t, "Gateway", ep["VpcEndpointType"])
		require.Equal(t, map[string]any{"Fn::Sub": "com.amazonaws.${AWS::Region}.dynamodb"}, ep["ServiceName"])
		routeTables := anySlice(ep["RouteTableIds"])
		require.Len(t, routeTables, 1)
		associated := map[string]bool{}
		for _, id := range tpl.ResourceIDs("AWS::EC2::SubnetRouteTableAssociation") {
			a := tpl.Resources[id].Properties
			if ref(a["RouteTableId"]) == ref(routeTables[0]) {
				associated[ref(a["SubnetId"])] = true
			}
		}
		require.Equal(t, map[string]bool{"PrivateSubnetA": true, "PrivateSubnetB": true}, associated, "both private subnets route through the endpoint")
		requireStatementOnTable(t, ep["PolicyDocument"], tables[0])

		// HTTPS out of the functions' group, for the endpoint.
		found := false
		for _, id := range tpl.ResourceIDs("AWS::EC2::SecurityGroupEgress") {
			r := tpl.Resources[id].Properties
			if ref(r["GroupId"]) == "FunctionSecurityGroup" && r["FromPort"] == int64(443) && r["ToPort"] == int64(443) {
				found = true
			}
		}
		require.True(t, found, "the functions may open HTTPS connections to DynamoDB")

		// The policy: the store's five calls on the table, attached to the
		// claiming functions alone.
		policies := tpl.ResourceIDs("AWS::IAM::ManagedPolicy")
		var tablePolicy string
		for _, id := range policies {
			if id == "IdempotencyTablePolicy" {
				tablePolicy = id
			}
		}
		require.NotEmpty(t, tablePolicy)
		requireStatementOnTable(t, tpl.Resources[tablePolicy].Properties["PolicyDocument"], tables[0])
		var with []string
		for _, fn := range tpl.Functions() {
			if policyRefs(fn)[tablePolicy] {
				with = append(with, fn.LogicalID)
			}
		}
		sort.Strings(with)
		require.Equal(t, claimingFunctions, with)
	})
}

// requireStatementOnTable checks that doc has one statement, which allows
// the store's calls on table and nothing else.
func requireStatementOnTable(t *testing.T, doc any, table string) {
	t.Helper()
	d, _ := doc.(map[string]any)
	statements := anySlice(d["Statement"])
	require.Len(t, statements, 1)
	s, _ := statements[0].(map[string]any)
	require.Equal(t, "Allow", s["Effect"])
	require.ElementsMatch(t, tableActions, anySlice(s["Action"]))
	require.Equal(t, map[string]any{"Fn::GetAtt": []any{table, "Arn"}}, s["Resource"])
}

// policyRefs returns the policies a function names by Ref.
func policyRefs(fn samtemplate.Function) map[string]bool {
	out := map[string]bool{}
	for _, p := range anySlice(fn.Policies) {
		if id := ref(p); id != "" {
			out[id] = true
		}
	}
	return out
}
