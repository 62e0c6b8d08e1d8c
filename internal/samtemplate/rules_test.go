package samtemplate_test

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
)

// ruleValues evaluates a Rules expression (Ref, Fn::Equals, Fn::Not,
// Fn::And, Fn::Or, Fn::Contains) for the given parameter values.
func ruleValue(t *testing.T, expr any, params map[string]string) any {
	t.Helper()
	switch e := expr.(type) {
	case string:
		return e
	case []any:
		out := make([]any, len(e))
		for i, x := range e {
			out[i] = ruleValue(t, x, params)
		}
		return out
	case map[string]any:
		require.Len(t, e, 1, "a rule function: %v", e)
		for fn, arg := range e {
			args := anySlice(arg)
			switch fn {
			case "Ref":
				v, ok := params[arg.(string)]
				require.True(t, ok, "no value for %s", arg)
				return v
			case "Fn::Equals":
				return fmt.Sprint(ruleValue(t, args[0], params)) == fmt.Sprint(ruleValue(t, args[1], params))
			case "Fn::Not":
				return !ruleValue(t, args[0], params).(bool)
			case "Fn::And", "Fn::Or":
				all, anyTrue := true, false
				for _, a := range args {
					b := ruleValue(t, a, params).(bool)
					all, anyTrue = all && b, anyTrue || b
				}
				return map[bool]bool{true: all, false: anyTrue}[fn == "Fn::And"]
			case "Fn::Contains":
				list := ruleValue(t, args[0], params).([]any)
				v := fmt.Sprint(ruleValue(t, args[1], params))
				return slices.ContainsFunc(list, func(x any) bool { return fmt.Sprint(x) == v })
			}
			t.Fatalf("rule function %s is not evaluated by this test", fn)
		}
	}
	t.Fatalf("unexpected rule expression %#v", expr)
	return nil
}

// brokenRules returns the names of the rules the values break, sorted.
func brokenRules(t *testing.T, tpl *samtemplate.Template, values map[string]string) []string {
	t.Helper()
	params := map[string]string{"AWS::Region": "us-east-1"}
	for name, p := range tpl.Section("Parameters") {
		params[name] = fmt.Sprint(p.(map[string]any)["Default"])
	}
	for k, v := range values {
		params[k] = v
	}
	var broken []string
	for name, r := range tpl.Section("Rules") {
		rule := r.(map[string]any)
		if c, ok := rule["RuleCondition"]; ok && !ruleValue(t, c, params).(bool) {
			continue
		}
		for _, a := range anySlice(rule["Assertions"]) {
			assert := a.(map[string]any)
			require.NotEmpty(t, assert["AssertDescription"], "rule %s says what is wrong", name)
			if !ruleValue(t, assert["Assert"], params).(bool) {
				broken = append(broken, name)
			}
		}
	}
	sort.Strings(broken)
	return broken
}

// The template's rules refuse the parameter combinations that cannot work.
func TestRules(t *testing.T) {
	t.Parallel()
	tpl := projectTemplate(t)
	require.Empty(t, brokenRules(t, tpl, nil), "the defaults")
	require.Empty(t, brokenRules(t, tpl, map[string]string{"Stage": "dev"}), "the defaults with dev")

	// MinCapacity <= MaxCapacity with prod, for every pair of allowed values.
	params := tpl.Section("Parameters")
	for _, lo := range anySlice(params["MinCapacity"].(map[string]any)["AllowedValues"]) {
		for _, hi := range anySlice(params["MaxCapacity"].(map[string]any)["AllowedValues"]) {
			l, _ := strconv.ParseFloat(fmt.Sprint(lo), 64)
			h, _ := strconv.ParseFloat(fmt.Sprint(hi), 64)
			v := map[string]string{"MinCapacity": fmt.Sprint(lo), "MaxCapacity": fmt.Sprint(hi)}
			broken := brokenRules(t, tpl, v)
			if l <= h {
				require.Empty(t, broken, "%v", v)
			} else {
				require.Len(t, broken, 1, "%v", v)
				require.Regexp(t, `^MinAtMostMax`, broken[0])
			}
			v["Stage"] = "dev" // dev uses 0 whatever MinCapacity says
			require.Empty(t, brokenRules(t, tpl, v), "%v", v)
		}
	}

	cases := []struct {
		values map[string]string
		broken []string
	}{
		{map[string]string{"Stage": "dev", "AuroraEngineVersion": "16.2"}, []string{"DevEngineCanPause"}},
		{map[string]string{"Stage": "dev", "AuroraEngineVersion": "16.3"}, nil},
		{map[string]string{"Stage": "prod", "AuroraEngineVersion": "16.1"}, nil},
		{map[string]string{"AvailabilityZoneA": "eu-west-1a"}, []string{"ZonesDiffer"}},
		{map[string]string{"AvailabilityZoneB": "eu-west-1b"}, []string{"ZonesDiffer"}},
		{map[string]string{"AvailabilityZoneA": "eu-west-1a", "AvailabilityZoneB": "eu-west-1a"}, []string{"ZonesDiffer"}},
		{map[string]string{"AvailabilityZoneA": "eu-west-1a", "AvailabilityZoneB": "eu-west-1c"}, nil},
		{map[string]string{"Stage": "dev", "AWS::Region": "il-central-1"}, []string{"DevRegionHasBundledCa"}},
		{map[string]string{"Stage": "dev", "AWS::Region": "mx-central-1"}, []string{"DevRegionHasBundledCa"}},
		{map[string]string{"Stage": "prod", "AWS::Region": "il-central-1"}, nil},
		{map[string]string{"Stage": "dev", "AWS::Region": "eu-west-1"}, nil},
	}
	for _, c := range cases {
		require.Equal(t, c.broken, brokenRules(t, tpl, c.values), "%v", c.values)
	}
}

// The regions the dev rule allows are exactly those whose root CAs the
// functions' RDS CA bundle holds.
func TestDevRegionsAreTheBundlesRegions(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "pkg", "dbpool", "rds-ca-bundle.pem"))
	require.NoError(t, err)
	cn := regexp.MustCompile(`^Amazon RDS ([a-z]{2}(?:-[a-z]+)+-[0-9]) Root CA`)
	regions := map[string]bool{}
	for len(b) > 0 {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		if m := cn.FindStringSubmatch(cert.Subject.CommonName); m != nil {
			regions[m[1]] = true
		}
	}
	var want []string
	for r := range regions {
		want = append(want, r)
	}
	sort.Strings(want)
	require.NotEmpty(t, want)

	rule := projectTemplate(t).Section("Rules")["DevRegionHasBundledCa"].(map[string]any)
	assert := anySlice(rule["Assertions"])[0].(map[string]any)["Assert"].(map[string]any)
	contains := anySlice(assert["Fn::Contains"])
	require.Equal(t, map[string]any{"Ref": "AWS::Region"}, contains[1])
	var got []string
	for _, r := range anySlice(contains[0]) {
		got = append(got, r.(string))
	}
	sort.Strings(got)
	require.Equal(t, want, got, "the rule's regions and the bundle's")
}

// The stack sets its database up: a custom resource served by
// MigrateFunction, run again whenever the function's code changes, which
// the task functions wait for, and whose reply reaches S3 through the
// gateway endpoint only.
func TestDatabaseSetupResource(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, p map[string]string) {
		setup, ok := tpl.Resources["DatabaseSetup"]
		require.True(t, ok)
		require.Equal(t, "Custom::DatabaseSetup", setup.Type)
		require.Equal(t, [2]string{"MigrateFunction", "Arn"}, func() [2]string { r, a := getAtt(setup.Properties["ServiceToken"]); return [2]string{r, a} }())
		require.Equal(t, "MigrateFunction.Version", ref(setup.Properties["CodeVersion"]), "a new function version runs the setup again")
		for _, name := range []string{"Stage", "IdempotencyStore", "DatabaseName"} {
			require.Equal(t, name, ref(setup.Properties[name]), "a change of %s runs the setup again", name)
		}
		timeout, _ := setup.Properties["ServiceTimeout"].(int64)
		require.Positive(t, timeout)
		require.LessOrEqual(t, timeout, int64(3600))
		migrate := tpl.Resources["MigrateFunction"]
		require.Equal(t, "live", migrate.Properties["AutoPublishAlias"])
		deps := anySlice(setup.Raw["DependsOn"])
		for _, d := range []string{"ClusterWriter", "S3GatewayEndpoint", "PrivateSubnetARouteTable", "PrivateSubnetBRouteTable"} {
			require.Contains(t, deps, any(d), "DatabaseSetup waits for %s", d)
		}
		if p["Stage"] == "prod" {
			require.Equal(t, "ProxyTargetGroup", ref(setup.Properties["ProxyTargets"]), "the setup waits for the proxy's target")
		}

		for _, fn := range tpl.Functions() {
			r := tpl.Resources[fn.LogicalID]
			vpc, _ := r.Properties["VpcConfig"].(map[string]any)
			if fn.LogicalID == "MigrateFunction" {
				require.Equal(t, []any{map[string]any{"Ref": "SetupReplySecurityGroup"}}, vpc["SecurityGroupIds"],
					"MigrateFunction adds the reply's group to the Globals' one")
				continue
			}
			require.Nil(t, vpc, "%s: the Globals' network only", fn.LogicalID)
			require.Equal(t, "DatabaseSetup", r.Raw["DependsOn"], "%s runs after the setup", fn.LogicalID)
		}

		// The reply's way out: a gateway endpoint for S3 on the subnets' own
		// route table, whose policy allows only the response bucket.
		ep := tpl.Resources["S3GatewayEndpoint"].Properties
		require.Equal(t, "Gateway", ep["VpcEndpointType"], "a gateway endpoint, which has no charge")
		require.Equal(t, []any{map[string]any{"Ref": "PrivateRouteTable"}}, ep["RouteTableIds"])
		stmts := anySlice(ep["PolicyDocument"].(map[string]any)["Statement"])
		require.Len(t, stmts, 1)
		stmt := stmts[0].(map[string]any)
		require.Equal(t, "s3:PutObject", stmt["Action"])
		sub := anySlice(stmt["Resource"].(map[string]any)["Fn::Sub"])
		require.Equal(t, "arn:${AWS::Partition}:s3:::cloudformation-custom-resource-response-${Region}/*", sub[0])
		for _, assoc := range []string{"PrivateSubnetARouteTable", "PrivateSubnetBRouteTable"} {
			require.Equal(t, "PrivateRouteTable", ref(tpl.Resources[assoc].Properties["RouteTableId"]))
		}
		require.Empty(t, tpl.ResourceIDs("AWS::EC2::NatGateway"))
		require.Empty(t, tpl.ResourceIDs("AWS::EC2::InternetGateway"))
		require.Empty(t, tpl.ResourceIDs("AWS::EC2::Route"), "no route but the endpoint's")
	})
}
