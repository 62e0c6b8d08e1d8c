package release

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/mod/semver"
)

// gorelease compares a module's API with its previous release.
const gorelease = "golang.org/x/exp/cmd/gorelease@v0.0.0-20261113113407-e3970619a1a4"

// Prepare readies the release of version: it checks that CHANGELOG.md has
// the version's section, writes a proxy holding the published modules at
// version, checks each module's API against its previous tag, builds the
// consumers through the proxy, writes each published go.mod and go.sum as
// the proxy holds them (siblings required at version), and prints the tags
// to push, in order. It pushes nothing and tags nothing.
func Prepare(ctx context.Context, root, version string, w io.Writer) error {
	if err := CheckVersion(version); err != nil {
		return err
	}
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		return err
	}
	section := regexp.MustCompile(`(?m)^## \[` + regexp.QuoteMeta(version) + `\]`)
	if !section.Match(changelog) {
		return fmt.Errorf("CHANGELOG.md has no section for %s: name the changes it releases under a heading \"## [%s] - YYYY-MM-DD\" (the [Unreleased] section's, renamed)", version, version)
	}
	proxy, err := os.MkdirTemp("", "ichido-release-proxy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(proxy)
	mods, err := WriteProxy(ctx, root, version, proxy)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "release: %d modules at %s written to a proxy\n", len(mods), version)
	previous := map[string]bool{} // the previous versions already in the proxy
	for _, m := range mods {
		prev, err := previousTag(ctx, root, m.Module, version)
		if err != nil {
			return err
		}
		if prev == "" {
			fmt.Fprintf(w, "release: %s: first release, no API to compare with\n", m.Path)
			continue
		}
		if !previous[prev] {
			// The previous release, as its tag holds it, joins the proxy,
			// so that the comparison needs no other proxy.
			if err := proxyFromTag(ctx, root, m.Tag(prev), prev, proxy); err != nil {
				return err
			}
			previous[prev] = true
		}
		if err := compareAPI(ctx, proxy, m.Module, prev, version, w); err != nil {
			return err
		}
	}
	if err := CheckConsumers(ctx, root, proxy, version, w); err != nil {
		return err
	}
	for _, m := range mods {
		if err := os.WriteFile(filepath.Join(root, m.Dir, "go.mod"), m.GoMod, 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, m.Dir, "go.sum"), m.GoSum, 0o644); err != nil {
			return err
		}
	}
	var tags []string
	for _, m := range mods {
		tags = append(tags, m.Tag(version))
	}
	fmt.Fprintf(w, "\nThe published go.mod files now require their siblings at %s. Commit them, then tag that commit and push the tags in this order (nothing was tagged or pushed):\n\n", version)
	for _, t := range tags {
		fmt.Fprintf(w, "  git tag %s\n", t)
	}
	fmt.Fprintf(w, "  git push origin %s\n", strings.Join(tags, " "))
	return nil
}

// previousTag is the highest tag of m below version with the same major
// version, or "".
func previousTag(ctx context.Context, root string, m Module, version string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", "tag", "--list", m.Dir+"/v*")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git tag --list: %w", err)
	}
	best := ""
	for _, t := range strings.Fields(string(out)) {
		v := strings.TrimPrefix(t, m.Dir+"/")
		if !semver.IsValid(v) || semver.Prerelease(v) != "" || semver.Major(v) != semver.Major(version) || semver.Compare(v, version) >= 0 {
			continue
		}
		if best == "" || semver.Compare(v, best) > 0 {
			best = v
		}
	}
	return best, nil
}

// compareAPI runs gorelease on the module as the proxy holds it at
// version, against prev, which the usual module proxy serves once its tag
// is pushed. gorelease refuses an incompatible change that version's
// number does not allow.
func compareAPI(ctx context.Context, proxy string, m Module, prev, version string, w io.Writer) error {
	env, err := ProxyEnv(ctx, proxy)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ichido-gorelease-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// A module of the release's version, unpacked from the proxy.
	get := fmt.Sprintf("%s@%s", m.Path, version)
	if out, err := goCmd(ctx, dir, env, "mod", "download", "-json", get); err != nil {
		return fmt.Errorf("go mod download %s: %v\n%s", get, err, out)
	}
	modDir, err := goCmd(ctx, dir, env, "list", "-m", "-f", "{{.Dir}}", get)
	if err != nil {
		return fmt.Errorf("go list -m %s: %v\n%s", get, err, modDir)
	}
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(src, os.DirFS(strings.TrimSpace(string(modDir)))); err != nil {
		return err
	}
	out, err := goCmd(ctx, src, env, "run", gorelease, "-base="+prev, "-version="+version)
	fmt.Fprintf(w, "release: %s against %s:\n%s", m.Path, prev, out)
	if err != nil {
		return fmt.Errorf("%s: gorelease refused %s against %s (see above)", m.Path, version, prev)
	}
	return nil
}

// proxyFromTag writes the published modules at version, as the commit that
// tag names holds them, into proxy.
func proxyFromTag(ctx context.Context, root, tag, version, proxy string) error {
	dir, err := os.MkdirTemp("", "ichido-previous-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	tree := filepath.Join(dir, "tree")
	add := exec.CommandContext(ctx, "git", "worktree", "add", "--detach", tree, tag)
	add.Dir = root
	if out, err := add.CombinedOutput(); err != nil {
		return fmt.Errorf("git worktree add %s: %v\n%s", tag, err, out)
	}
	defer func() {
		rm := exec.Command("git", "worktree", "remove", "--force", tree)
		rm.Dir = root
		_ = rm.Run()
	}()
	if _, err := WriteProxy(ctx, tree, version, proxy); err != nil {
		return fmt.Errorf("the release %s from its tag: %w", version, err)
	}
	return nil
}
