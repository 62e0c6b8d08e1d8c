package samtemplate_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
)

// TestDBParametersAreModifiable: every parameter the template's parameter
// groups set, for every profile, is on the repository's list of the
// family's modifiable parameters.
func TestDBParametersAreModifiable(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, _ map[string]string) {
		require.NotEmpty(t, tpl.ResourceIDs("AWS::RDS::DBClusterParameterGroup"))
		require.Empty(t, samtemplate.CheckDBParameters(tpl))
	})
	list, err := samtemplate.LoadDBParameters("aurora-postgresql16", "cluster")
	require.NoError(t, err)
	require.False(t, list["cron.use_background_workers"].Modifiable, "AWS lists it as one a user cannot modify")
	require.True(t, list["cron.database_name"].Modifiable)
	for name, m := range list {
		require.NotEmpty(t, m.Source, name)
	}
}

// TestDBParametersRefused: a template that sets a parameter AWS fixes, one
// that is not on the list, or a family without a list fails the check, and
// the error names the parameter.
func TestDBParametersRefused(t *testing.T) {
	t.Parallel()
	group := func(kind, family, params string) string {
		return "Resources:\n  Group:\n    Type: AWS::RDS::" + kind + "\n    Properties:\n      Description: x\n      Family: " + family + "\n      Parameters:\n" + params
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"a fixed parameter", group("DBClusterParameterGroup", "aurora-postgresql16", "        shared_preload_libraries: pg_cron\n        cron.use_background_workers: 1\n"),
			"Group sets cron.use_background_workers, which AWS does not let a user modify"},
		{"a parameter not on the list", group("DBClusterParameterGroup", "aurora-postgresql16", "        cron.database_name: app\n        made_up.setting: on\n"),
			"Group sets made_up.setting, which is not on the aurora-postgresql16 list"},
		{"a family without a list", group("DBClusterParameterGroup", "aurora-postgresql17", "        cron.database_name: app\n"),
			`no list of the cluster parameters of family "aurora-postgresql17"`},
		{"an instance group without a list", group("DBParameterGroup", "aurora-postgresql16", "        log_min_duration_statement: 100\n"),
			`no list of the instance parameters of family "aurora-postgresql16"`},
		{"a family from a parameter", group("DBClusterParameterGroup", "!Ref Family", "        cron.database_name: app\n"),
			"Family must be a literal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := samtemplate.Parse([]byte(tc.doc))
			require.NoError(t, err)
			errs := samtemplate.CheckDBParameters(tpl)
			require.Len(t, errs, 1, "%v", errs)
			require.ErrorIs(t, errs[0], samtemplate.ErrDBParameter)
			require.Contains(t, errs[0].Error(), tc.want)
		})
	}
	// The project's own template with the parameter put back fails.
	tpl := projectTemplate(t)
	broken, err := samtemplate.Parse([]byte(strings.Replace(mustRead(t, "template.yaml"),
		"        cron.database_name: !Ref DatabaseName\n",
		"        cron.database_name: !Ref DatabaseName\n        cron.use_background_workers: 1\n", 1)))
	require.NoError(t, err)
	require.Len(t, tpl.ResourceIDs("AWS::RDS::DBClusterParameterGroup"), 1)
	errs := samtemplate.CheckDBParameters(broken)
	require.Len(t, errs, 1)
	require.ErrorContains(t, errs[0], "ClusterParameterGroup sets cron.use_background_workers")
}
