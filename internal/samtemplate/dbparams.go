package samtemplate

import (
	"bufio"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
)

// ErrDBParameter is returned (wrapped) by CheckDBParameters for a
// parameter group that sets a parameter its engine family does not let a
// user modify, or that is not on the repository's list for the family.
var ErrDBParameter = errors.New("samtemplate: a DB parameter group sets a parameter AWS may refuse")

//go:embed dbparams/*.tsv
var dbParamFiles embed.FS

// Modifiability is what AWS says of one engine parameter.
type Modifiability struct {
	// Modifiable is AWS's IsModifiable.
	Modifiable bool
	// Source names where the entry comes from.
	Source string
}

// DBParameters maps each parameter name on a family's list to what AWS
// says of it. The lists live in dbparams/<family>.<kind>.tsv, kind being
// "cluster" (AWS::RDS::DBClusterParameterGroup) or "instance"
// (AWS::RDS::DBParameterGroup).
type DBParameters map[string]Modifiability

// LoadDBParameters reads the repository's list for a family and kind. A
// family without a list is an error naming the file to add.
func LoadDBParameters(family, kind string) (DBParameters, error) {
	name := "dbparams/" + family + "." + kind + ".tsv"
	f, err := dbParamFiles.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no list of the %s parameters of family %q (add internal/samtemplate/%s from describe-engine-default-%sparameters)",
			ErrDBParameter, kind, family, name, map[string]string{"cluster": "cluster-"}[kind])
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	params := DBParameters{}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if strings.TrimSpace(text) == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.SplitN(text, "\t", 3)
		if len(fields) != 3 || (fields[1] != "modifiable" && fields[1] != "fixed") || fields[2] == "" {
			return nil, fmt.Errorf("samtemplate: %s:%d: want name, modifiable or fixed, and a source, tab separated: %q", name, line, text)
		}
		if _, dup := params[fields[0]]; dup {
			return nil, fmt.Errorf("samtemplate: %s:%d: %s is listed twice", name, line, fields[0])
		}
		params[fields[0]] = Modifiability{Modifiable: fields[1] == "modifiable", Source: fields[2]}
	}
	return params, sc.Err()
}

// CheckDBParameters checks every parameter that the template's DB cluster
// and DB instance parameter groups set against the repository's list for
// their family. It returns one error per parameter that is fixed, or not on
// the list, and per group whose family is not a literal or has no list.
func CheckDBParameters(t *Template) []error {
	var errs []error
	for _, kind := range []struct{ typ, kind string }{
		{"AWS::RDS::DBClusterParameterGroup", "cluster"},
		{"AWS::RDS::DBParameterGroup", "instance"},
	} {
		for _, id := range t.ResourceIDs(kind.typ) {
			props := t.Resources[id].Properties
			family, ok := props["Family"].(string)
			if !ok {
				errs = append(errs, fmt.Errorf("%w: %s: Family must be a literal, to be checked (got %v)", ErrDBParameter, id, props["Family"]))
				continue
			}
			list, err := LoadDBParameters(family, kind.kind)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", id, err))
				continue
			}
			set, _ := props["Parameters"].(map[string]any)
			names := make([]string, 0, len(set))
			for name := range set {
				names = append(names, name)
			}
			sort.Strings(names)
			for _, name := range names {
				m, listed := list[name]
				switch {
				case !listed:
					errs = append(errs, fmt.Errorf("%w: %s sets %s, which is not on the %s list of modifiable parameters (check it with describe-engine-default-%sparameters and add it)",
						ErrDBParameter, id, name, family, map[string]string{"cluster": "cluster-"}[kind.kind]))
				case !m.Modifiable:
					errs = append(errs, fmt.Errorf("%w: %s sets %s, which AWS does not let a user modify in %s (%s): CloudFormation would refuse the parameter group",
						ErrDBParameter, id, name, family, m.Source))
				}
			}
		}
	}
	return errs
}
