package release

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/mod/module"
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
// version, against prev, which the proxy holds too (from its tag).
// gorelease refuses an incompatible change that version's number does not
// allow. It runs with a copy of the proxy that lacks the module at version,
// which it checks is not released yet.
func compareAPI(ctx context.Context, proxy string, m Module, prev, version string, w io.Writer) error {
	dir, err := os.MkdirTemp("", "ichido-gorelease-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	modcache := filepath.Join(dir, "modcache")
	env, err := ProxyEnv(ctx, proxy, modcache)
	if err != nil {
		return err
	}
	// The module at version, unpacked from the proxy.
	get := fmt.Sprintf("%s@%s", m.Path, version)
	modDir, err := goCmd(ctx, dir, env, "mod", "download", "-json", get)
	if err != nil {
		return fmt.Errorf("go mod download %s: %v\n%s", get, err, modDir)
	}
	var dl struct{ Dir string }
	if err := json.Unmarshal(modDir, &dl); err != nil {
		return err
	}
	src := filepath.Join(dir, "src")
	if err := os.CopyFS(src, os.DirFS(dl.Dir)); err != nil {
		return err
	}
	// The proxy without the module at version.
	without := filepath.Join(dir, "proxy")
	if err := os.CopyFS(without, os.DirFS(proxy)); err != nil {
		return err
	}
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	at := filepath.Join(without, filepath.FromSlash(esc), "@v")
	for _, ext := range []string{".zip", ".mod", ".info"} {
		_ = os.Remove(filepath.Join(at, version+ext))
	}
	list, err := os.ReadFile(filepath.Join(at, "list"))
	if err != nil {
		return err
	}
	kept := slices.DeleteFunc(strings.Fields(string(list)), func(v string) bool { return v == version })
	if err := os.WriteFile(filepath.Join(at, "list"), []byte(strings.Join(kept, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	env, err = ProxyEnv(ctx, without, modcache)
	if err != nil {
		return err
	}
	out, err := goCmd(ctx, src, env, "run", gorelease, "-base="+prev, "-version="+version)
	fmt.Fprintf(w, "release: %s against %s:\n%s", m.Path, prev, out)
	if err != nil {
		return fmt.Errorf("%s: gorelease refused %s against %s (see above)", m.Path, version, prev)
	}
	// gorelease lets a v0 module break its API in any release; the version
	// policy allows it in a minor release only (docs/versioning.md).
	if strings.Contains(string(out), "## incompatible changes") && !breakAllowed(prev, version) {
		return fmt.Errorf("%s: %s changes the API incompatibly (see above), which the version policy allows only in a minor release of v0 or a new major version", m.Path, version)
	}
	return nil
}

// breakAllowed reports whether the release version may break the API of
// prev: a new major version, or a new minor version of v0.
func breakAllowed(prev, version string) bool {
	if semver.Major(prev) != semver.Major(version) {
		return true
	}
	return semver.Major(version) == "v0" && semver.MajorMinor(prev) != semver.MajorMinor(version)
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
