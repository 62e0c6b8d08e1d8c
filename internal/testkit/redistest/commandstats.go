package redistest

import (
	"context"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's line of INFO commandstats: how many times
// the server ran it and the microseconds it spent on those calls.
type CommandStat struct {
	Calls float64
	Usec  float64
}

// CommandStats reads INFO commandstats from c, by command name as Redis
// gives it (lower case; a subcommand as "config|resetstat"). The calls a
// measurement makes itself, INFO and CONFIG RESETSTAT, are left out, so
// after a CONFIG RESETSTAT the result is what ran since. A script's inner
// commands are listed under their own names beside the script.
func CommandStats(ctx context.Context, c redis.UniversalClient) (map[string]CommandStat, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	stats := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		if name == "info" || name == "config|resetstat" {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.Calls = x
			case "usec":
				st.Usec = x
			}
		}
		stats[name] = st
	}
	return stats, nil
}

// ServerUsec is the server's time in stats: when a script ran, the time
// of the scripts (EVAL, EVALSHA, FCALL and SCRIPT, which includes their
// inner commands'), else the sum over the plain commands.
func ServerUsec(stats map[string]CommandStat) float64 {
	script := func(name string) bool {
		return strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") || strings.HasPrefix(name, "script")
	}
	scripted := false
	for name := range stats {
		if strings.HasPrefix(name, "eval") || strings.HasPrefix(name, "fcall") {
			scripted = true
		}
	}
	var us float64
	for name, st := range stats {
		if !scripted || script(name) {
			us += st.Usec
		}
	}
	return us
}
