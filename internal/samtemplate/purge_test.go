package samtemplate_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/dbsetup"
)

// refs collects the logical ids v names with Ref.
func refs(v any, into map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		if id, ok := x["Ref"].(string); ok && len(x) == 1 {
			into[id] = true
		}
		for _, e := range x {
			refs(e, into)
		}
	case []any:
		for _, e := range x {
			refs(e, into)
		}
	}
}

// TestDatabaseSetupAfterItsPath: in every stage the DatabaseSetup resource
// names each security-group rule on the functions' path to the database,
// so that CloudFormation creates them before the setup connects.
func TestDatabaseSetupAfterItsPath(t *testing.T) {
	t.Parallel()
	for _, stage := range []string{"prod", "dev"} {
		tpl, err := projectTemplate(t).Resolve(map[string]string{"Stage": stage})
		require.NoError(t, err)
		onPath := map[string]bool{}
		for id, r := range tpl.Resources {
			if r.Type != "AWS::EC2::SecurityGroupIngress" && r.Type != "AWS::EC2::SecurityGroupEgress" {
				continue
			}
			named := map[string]bool{}
			refs(r.Properties, named)
			if named["DatabaseSecurityGroup"] || named["ProxySecurityGroup"] {
				onPath[id] = true
			}
		}
		require.NotEmpty(t, onPath, stage)
		named := map[string]bool{}
		refs(tpl.Resources["DatabaseSetup"].Properties["NetworkRules"], named)
		require.Equal(t, onPath, named, "Stage=%s: DatabaseSetup's NetworkRules name the rules of the path to the database", stage)
	}
}

// TestPurgeIsProvenAndWatched: the parameter group leaves how pg_cron
// starts jobs to AWS (the setup proves that they run), PurgeCheckFunction
// runs the purge check on a schedule, as the check user, which the setup
// creates, and KeyPurgeAlarm reads exactly the metrics the check writes,
// under its namespace and dimension.
func TestPurgeIsProvenAndWatched(t *testing.T) {
	t.Parallel()
	var emf bytes.Buffer
	require.NoError(t, dbsetup.WriteEMF(&emf, "f", time.Now(), dbsetup.PurgeHealth{}))
	var line map[string]any
	require.NoError(t, json.Unmarshal(emf.Bytes(), &line))
	written := map[string]bool{}
	for _, m := range line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)["Metrics"].([]any) {
		written[m.(map[string]any)["Name"].(string)] = true
	}

	for _, stage := range []string{"prod", "dev"} {
		tpl, err := projectTemplate(t).Resolve(map[string]string{"Stage": stage})
		require.NoError(t, err)
		params := tpl.Resources["ClusterParameterGroup"].Properties["Parameters"].(map[string]any)
		require.NotContains(t, params, "cron.use_background_workers", "Stage=%s: AWS does not let a user modify it", stage)

		require.NotContains(t, tpl.Resources["MigrateFunction"].Properties, "Events", "Stage=%s: the setup's function, which may log in as the master user, runs on deploys only", stage)
		events := tpl.Resources["PurgeCheckFunction"].Properties["Events"].(map[string]any)
		check := events["PurgeCheck"].(map[string]any)
		require.Equal(t, "Schedule", check["Type"], stage)
		env := tpl.Resources["PurgeCheckFunction"].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
		require.Equal(t, map[string]any{"Ref": "DatabaseCheckUser"}, env["DB_USER"], stage)
		setupEnv := tpl.Resources["MigrateFunction"].Properties["Environment"].(map[string]any)["Variables"].(map[string]any)
		require.Equal(t, map[string]any{"Ref": "DatabaseCheckUser"}, setupEnv["DB_SETUP_CHECK_USER"], "Stage=%s: the setup creates the check user", stage)

		alarm := tpl.Resources["KeyPurgeAlarm"].Properties
		var read []string
		for _, q := range alarm["Metrics"].([]any) {
			stat, ok := q.(map[string]any)["MetricStat"].(map[string]any)
			if !ok {
				continue
			}
			m := stat["Metric"].(map[string]any)
			require.Equal(t, dbsetup.Namespace, m["Namespace"])
			dims := m["Dimensions"].([]any)
			require.Len(t, dims, 1)
			require.Equal(t, "FunctionName", dims[0].(map[string]any)["Name"])
			require.Equal(t, map[string]any{"Ref": "PurgeCheckFunction"}, dims[0].(map[string]any)["Value"])
			name := m["MetricName"].(string)
			require.True(t, written[name], "Stage=%s: the alarm reads %s, which the check writes", stage, name)
			read = append(read, name)
		}
		require.True(t, slices.Contains(read, "PurgeRunsFailed") && slices.Contains(read, "ExpiredKeys"), stage)
	}
}
