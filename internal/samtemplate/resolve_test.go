package samtemplate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	tpl, err := samtemplate.Parse([]byte(`
Parameters:
  Stage: {Type: String, Default: prod, AllowedValues: [prod, dev]}
  Zone: {Type: String, Default: ""}
Conditions:
  Dev: !Equals [!Ref Stage, dev]
  Prod: !Not [!Condition Dev]
  DevWithZone: !And [!Condition Dev, !Not [!Equals [!Ref Zone, ""]]]
  Either: !Or [!Condition Dev, !Condition Prod]
Resources:
  Proxy:
    Type: AWS::RDS::DBProxy
    Condition: Prod
  F:
    Type: AWS::Serverless::Function
    Properties:
      Environment:
        Variables:
          HOST: !If [Prod, !GetAtt Proxy.Endpoint, !GetAtt Cluster.Endpoint.Address]
          ZONE: !If [DevWithZone, !Ref Zone, !Ref AWS::NoValue]
          BOTH: !If [Either, yes, no]
      Layers: [a, !If [Dev, b, !Ref AWS::NoValue]]
Outputs:
  ProxyEndpoint: {Condition: Prod, Value: !GetAtt Proxy.Endpoint}
`))
	require.NoError(t, err)

	prod, err := tpl.Resolve(nil)
	require.NoError(t, err)
	require.Contains(t, prod.Resources, "Proxy")
	require.Contains(t, prod.Section("Outputs"), "ProxyEndpoint")
	vars := prod.Functions()[0].EnvironmentRaw
	require.Equal(t, map[string]any{"Fn::GetAtt": []any{"Proxy", "Endpoint"}}, vars["HOST"])
	require.NotContains(t, vars, "ZONE")
	require.Equal(t, "yes", vars["BOTH"])
	require.Equal(t, []any{"a"}, prod.Resources["F"].Properties["Layers"])

	dev, err := tpl.Resolve(map[string]string{"Stage": "dev", "Zone": "eu-west-1a"})
	require.NoError(t, err)
	require.NotContains(t, dev.Resources, "Proxy")
	require.NotContains(t, dev.Section("Outputs"), "ProxyEndpoint")
	vars = dev.Functions()[0].EnvironmentRaw
	require.Equal(t, map[string]any{"Fn::GetAtt": []any{"Cluster", "Endpoint.Address"}}, vars["HOST"])
	require.Equal(t, map[string]any{"Ref": "Zone"}, vars["ZONE"])
	require.Equal(t, []any{"a", "b"}, dev.Resources["F"].Properties["Layers"])
	require.Contains(t, tpl.Resources, "Proxy", "the template itself is unchanged")

	_, err = tpl.Resolve(map[string]string{"Stages": "dev"})
	require.ErrorIs(t, err, samtemplate.ErrUnresolvable)
	bad, err := samtemplate.Parse([]byte("Conditions:\n  C: !Equals [!GetAtt X.Y, a]\nResources: {}\n"))
	require.NoError(t, err)
	_, err = bad.Resolve(nil)
	require.ErrorIs(t, err, samtemplate.ErrUnresolvable)
}
