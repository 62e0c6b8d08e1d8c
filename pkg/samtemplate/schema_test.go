package samtemplate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/samtemplate"
)

func TestTemplateMatchesSchema(t *testing.T) {
	t.Parallel()
	v := sharedValidator(t)
	tpl := projectTemplate(t)
	require.NotEmpty(t, tpl.Resources)
	for _, err := range v.Validate(tpl) {
		t.Error(err)
	}
}

// The check must be able to fail: broken resources are rejected, and
// intrinsic functions are accepted only where a value goes.
func TestValidatorRejectsBrokenResources(t *testing.T) {
	t.Parallel()
	v := sharedValidator(t)
	cases := []struct {
		name    string
		yaml    string
		wantErr string // "" means valid
	}{{
		name: "proxy with intrinsics everywhere",
		yaml: `
Resources:
  R:
    Type: AWS::RDS::DBProxy
    Properties:
      DBProxyName: !Sub "${AWS::StackName}-proxy"
      EngineFamily: POSTGRESQL
      RequireTLS: !If [C, true, false]
      IdleClientTimeout: !Ref Timeout
      RoleArn: !GetAtt Role.Arn
      VpcSubnetIds: !Split [",", !Ref Subnets]
      Auth:
        - !If [C, {AuthScheme: SECRETS, IAMAuth: REQUIRED, SecretArn: !Ref S}, !Ref AWS::NoValue]
`,
	}, {
		name: "missing required property",
		yaml: `
Resources:
  R:
    Type: AWS::RDS::DBProxy
    Properties:
      DBProxyName: p
      RoleArn: arn
      VpcSubnetIds: [a]
      Auth: [{AuthScheme: SECRETS}]
`,
		wantErr: "EngineFamily",
	}, {
		name: "unknown property on a SAM function",
		yaml: `
Resources:
  R:
    Type: AWS::Serverless::Function
    Properties:
      Runtime: provided.al2023
      Handler: bootstrap
      CodeUri: .
      Runtimee: provided.al2023
`,
		wantErr: "Runtimee",
	}, {
		name: "unknown property in a nested CloudFormation type",
		yaml: `
Resources:
  R:
    Type: AWS::RDS::DBCluster
    Properties:
      Engine: aurora-postgresql
      ServerlessV2ScalingConfiguration: {MinCapacity: 0.5, MaxCapacityy: 2}
`,
		wantErr: "MaxCapacityy",
	}, {
		name: "wrong JSON type",
		yaml: `
Resources:
  R:
    Type: AWS::RDS::DBCluster
    Properties:
      Engine: aurora-postgresql
      StorageEncrypted: [true]
`,
		wantErr: "StorageEncrypted",
	}, {
		name: "an object that is not an intrinsic where a string goes",
		yaml: `
Resources:
  R:
    Type: AWS::RDS::DBCluster
    Properties:
      Engine: {Ref: E, Extra: 1}
`,
		wantErr: "Engine",
	}, {
		name: "intrinsic not allowed for the resource's own keys",
		yaml: `
Resources:
  R:
    Type: AWS::EC2::VPC
    DeletionPolicy: !Ref Policy
    Properties: {CidrBlock: 10.0.0.0/16}
`,
		wantErr: "DeletionPolicy",
	}, {
		name: "unknown resource type",
		yaml: `
Resources:
  R:
    Type: AWS::Nope::Thing
`,
		wantErr: "not in the schema",
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tpl, err := samtemplate.Parse([]byte(c.yaml))
			require.NoError(t, err)
			err = v.ValidateResource(tpl.Resources["R"])
			if c.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), c.wantErr)
		})
	}
}

func TestValidatorChecksSections(t *testing.T) {
	t.Parallel()
	tpl, err := samtemplate.Parse([]byte("Resources: {}\nOutput: {}\n"))
	require.NoError(t, err)
	errs := sharedValidator(t).Validate(tpl)
	require.Len(t, errs, 1)
	require.Contains(t, errs[0].Error(), `"Output"`)
}

func TestValidatorChecksGlobals(t *testing.T) {
	t.Parallel()
	v := sharedValidator(t)
	tpl, err := samtemplate.Parse([]byte(`
Globals:
  Function:
    Runtime: provided.al2023
    Timeoutt: 3
Resources: {}
`))
	require.NoError(t, err)
	err = v.ValidateGlobals(tpl)
	require.Error(t, err)
	require.Contains(t, err.Error(), "Timeoutt")

	tpl, err = samtemplate.Parse([]byte(`
Globals:
  Function:
    Timeout: !Ref T
    Environment: {Variables: {A: !If [C, x, y]}}
Resources: {}
`))
	require.NoError(t, err)
	require.NoError(t, v.ValidateGlobals(tpl))
}
