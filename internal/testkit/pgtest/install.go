package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// EnsureInstalled returns the directory of the PostgreSQL 15 server binaries,
// installing the server and pg_cron through apt first when either is missing
// and the caller is root. PG_BIN overrides the directory.
func EnsureInstalled(ctx context.Context) (string, error) {
	if bin, ok := findServer(); ok && cronInstalled(bin) {
		return bin, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("pgtest: the PostgreSQL 15 server and pg_cron are needed: install them with 'sudo apt-get install %s' (or set TEST_DATABASE_URL to a database with pg_cron)", strings.Join(Packages, " "))
	}
	if err := AptInstall(ctx, Packages...); err != nil {
		return "", err
	}
	bin, ok := findServer()
	if !ok || !cronInstalled(bin) {
		return "", fmt.Errorf("pgtest: %s installed, but initdb or pg_cron is still missing", strings.Join(Packages, " "))
	}
	return bin, nil
}

// AptInstall installs Debian packages (as root), refreshing the package
// lists first.
func AptInstall(ctx context.Context, pkgs ...string) error {
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq", "--no-install-recommends"}, pkgs...)} {
		cmd := exec.CommandContext(ctx, "apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("pgtest: apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func findServer() (string, bool) {
	if bin := os.Getenv("PG_BIN"); bin != "" {
		_, err := os.Stat(filepath.Join(bin, "initdb"))
		return bin, err == nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Strings(matches)
	for _, m := range matches {
		if strings.Contains(m, "/15/") {
			return filepath.Dir(m), true
		}
	}
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), true
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), true
	}
	return "", false
}

// cronInstalled reports whether pg_cron's extension files sit beside the
// server's share directory.
func cronInstalled(bin string) bool {
	out, err := exec.Command(filepath.Join(bin, "pg_config"), "--sharedir").Output()
	share := strings.TrimSpace(string(out))
	if err != nil || share == "" {
		// Debian's layout: /usr/lib/postgresql/15/bin → /usr/share/postgresql/15.
		share = filepath.Join("/usr/share/postgresql", filepath.Base(filepath.Dir(bin)))
	}
	_, err = os.Stat(filepath.Join(share, "extension", "pg_cron.control"))
	return err == nil
}
