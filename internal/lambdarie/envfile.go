package lambdarie

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
)

// EnvFile is an environment file in the format of `sam local invoke
// --env-vars`: {"Parameters": {...}, "<LogicalId>": {...}}. Parameters apply
// to every function; a function's own section overrides them.
type EnvFile map[string]map[string]string

// LoadEnvFile reads an env.json file. Values may be JSON strings, numbers
// or booleans; they become strings.
func LoadEnvFile(path string) (EnvFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lambdarie: %w", err)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("lambdarie: %s is not an env-vars file ({\"Parameters\": {...}, \"<LogicalId>\": {...}}): %w", path, err)
	}
	f := EnvFile{}
	for section, vars := range raw {
		f[section] = map[string]string{}
		for k, v := range vars {
			switch v := v.(type) {
			case string:
				f[section][k] = v
			case float64:
				f[section][k] = strconv.FormatFloat(v, 'f', -1, 64)
			case bool:
				f[section][k] = strconv.FormatBool(v)
			case nil:
				f[section][k] = ""
			default:
				return nil, fmt.Errorf("lambdarie: %s: %s.%s must be a string, number or boolean", path, section, k)
			}
		}
	}
	return f, nil
}

// For returns the environment of one function: Parameters, then the
// function's own section.
func (f EnvFile) For(logicalID string) map[string]string {
	env := map[string]string{}
	for k, v := range f["Parameters"] {
		env[k] = v
	}
	for k, v := range f[logicalID] {
		env[k] = v
	}
	return env
}

// Undeclared returns the variables of env that declared (a function's
// template Environment) does not list, sorted. `sam local invoke` only
// overrides declared variables and drops the others; the project's invoke
// passes them all and warns about these.
func Undeclared(env, declared map[string]string) []string {
	var out []string
	for k := range env {
		if _, ok := declared[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}
