package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// write saves results.json, the plots and performance.md.
func (b *bench) write() error {
	r := b.res
	js, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.plots, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	plots, err := b.drawPlots()
	if err != nil {
		r.Notes = append(r.Notes, "drawing the plots failed: "+err.Error())
	}
	md := b.markdown(plots)
	return os.WriteFile(filepath.Join(b.cfg.out, "performance.md"), []byte(md), 0o644)
}

// rerender writes performance.md again from a results.json, keeping the
// plots already drawn (their raw latencies are not in the JSON).
func (b *bench) rerender(path string) error {
	js, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(js, b.res); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	b.res.evaluate()
	// The replay's profile is split again, by the rules of this build.
	if d := b.res.Direct; d != nil && d.Profile != nil {
		if raw, err := os.ReadFile(filepath.Join(b.plots, replayProfileFile)); err == nil {
			if p, err := profile.ParseData(raw); err == nil {
				d.Profile.Client = splitProfile(p, d.Profile.ClientUs)
			}
		}
	}
	plots := map[string]string{}
	for key, name := range map[string]string{"noise": "noise.png", "floor": "floor.png", "durability": "durability.png",
		"durability_p99": "durability-p99.png", "e2e": "e2e.png", "growth": "growth.png", "purge": "purge.png", "coldstart": "coldstart.png"} {
		if _, err := os.Stat(filepath.Join(b.plots, name)); err == nil {
			plots[key] = "performance/" + name
		}
	}
	js, err = json.MarshalIndent(b.res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.plots, "results.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(b.cfg.out, "performance.md"), []byte(b.markdown(plots)), 0o644)
}

// drawPlots draws every plot it has data for and returns their file names
// by section.
func (b *bench) drawPlots() (map[string]string, error) {
	r := b.res
	out := map[string]string{}
	draw := func(key, name string, f func(path string) error) error {
		if err := f(filepath.Join(b.plots, name)); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out[key] = "performance/" + name
		return nil
	}
	var errs []string
	try := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(r.Noise.Points) > 0 {
		try(draw("noise", "noise.png", func(p string) error {
			var s series
			s.name = "SHA-256 over 16 MiB"
			for _, pt := range r.Noise.Points {
				s.xs, s.ys = append(s.xs, pt.Seconds), append(s.ys, pt.Ms)
			}
			return scatterChart(p, "Calibration workload through the run (flat = quiet machine)", "seconds since start", "ms", []series{s}, nil)
		}))
	}
	if f := r.Floor; f != nil && len(f.Postgres) > 0 {
		try(draw("floor", "floor.png", func(p string) error {
			var groups []string
			var p50, p99 series
			p50.name, p99.name = "p50", "p99"
			add := func(store string, ss []Side) {
				for _, s := range ss {
					groups = append(groups, store+"\n"+shortName(s.Name))
					p50.ys, p99.ys = append(p50.ys, s.P50Ms), append(p99.ys, s.P99Ms)
				}
			}
			add("PG", f.Postgres)
			add("Redis", f.Redis)
			return barChart(p, "Floor vs the decorator (one client; medians of repetitions)", "latency (ms)", groups, []series{p50, p99})
		}))
	}
	if d := r.Durability; d != nil && len(d.Levels) > 0 {
		byName := func(metric func(Side) float64) []series {
			var ss []series
			for _, l := range d.Levels {
				for _, s := range l.Sides {
					i := sort.Search(len(ss), func(i int) bool { return ss[i].name >= s.Name })
					if i == len(ss) || ss[i].name != s.Name {
						ss = append(ss[:i], append([]series{{name: s.Name}}, ss[i:]...)...)
					}
					ss[i].xs = append(ss[i].xs, float64(l.Clients))
					ss[i].ys = append(ss[i].ys, metric(s))
				}
			}
			return ss
		}
		try(draw("durability", "durability.png", func(p string) error {
			return lineChart(p, "Claim + complete throughput", "concurrent clients", "operations/s", true, byName(func(s Side) float64 { return s.Throughput }))
		}))
		try(draw("durability_p99", "durability-p99.png", func(p string) error {
			return lineChart(p, "Claim + complete p99 latency", "concurrent clients", "p99 (ms)", true, byName(func(s Side) float64 { return s.P99Ms }))
		}))
	}
	if e := r.EndToEnd; e != nil && len(e.Sides) > 0 {
		try(draw("e2e", "e2e.png", func(p string) error {
			var groups []string
			var tput series
			tput.name = "requests/s"
			for _, s := range e.Sides {
				groups = append(groups, shortName(s.Name))
				tput.ys = append(tput.ys, s.Throughput)
			}
			return barChart(p, fmt.Sprintf("POST /tasks over the local API, %d clients", e.Clients), "requests/s", groups, []series{tput})
		}))
	}
	if g := r.Growth; g != nil && len(g.Steps) > 0 {
		try(draw("growth", "growth.png", func(p string) error {
			p50, p99 := series{name: "claim p50"}, series{name: "claim p99"}
			for _, s := range g.Steps {
				p50.xs, p50.ys = append(p50.xs, float64(s.LiveKeys)), append(p50.ys, s.Claim.P50Ms)
				p99.xs, p99.ys = append(p99.xs, float64(s.LiveKeys)), append(p99.ys, s.Claim.P99Ms)
			}
			return lineChart(p, "Claim latency as the table grows", "live keys", "latency (ms)", true, []series{p50, p99})
		}))
		if pr := g.Purge; pr != nil && len(pr.timeline.latencies) > 0 {
			try(draw("purge", "purge.png", func(p string) error {
				s := series{name: "claim latency during the purge"}
				s.xs, s.ys = pr.timeline.offsets, pr.timeline.latencies
				refs := []series{{name: "p99 without a purge", ys: []float64{pr.Baseline.P99Ms}}, {name: "3× that (target)", ys: []float64{3 * pr.Baseline.P99Ms}}}
				return scatterChart(p, fmt.Sprintf("Claims while purging %s expired keys (first purge run)", countLabel(pr.ExpiredKeys)), "seconds since the purge started", "ms", []series{s}, refs)
			}))
		}
	}
	if c := r.ColdStart; c != nil && len(c.Runs) > 0 {
		try(draw("coldstart", "coldstart.png", func(p string) error {
			total, init, warm := series{name: "process start → first response"}, series{name: "init (first − warm event)"}, series{name: "warm event"}
			for i, run := range c.Runs {
				x := float64(i + 1)
				total.xs, total.ys = append(total.xs, x), append(total.ys, run.TotalMs)
				init.xs, init.ys = append(init.xs, x), append(init.ys, run.InitMs)
				warm.xs, warm.ys = append(warm.xs, x), append(warm.ys, run.WarmInvokeMs)
			}
			refs := []series{{name: "database connect (median)", ys: []float64{c.DBConnectMs}}}
			return scatterChart(p, "Cold starts under aws-lambda-rie", "run", "ms", []series{total, init, warm}, refs)
		}))
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return out, nil
}

// shortName fits a side's name under a bar.
func shortName(name string) string {
	switch name {
	case "floor (SELECT 1)":
		return "SELECT 1"
	case "floor (PING)":
		return "PING"
	case "first request":
		return "first req."
	case "claim alone (completed key)":
		return "claim alone"
	case noopShapeName:
		return "no-op call"
	case "wrapped (first request)":
		return "wrapped, first"
	case "wrapped (replay)":
		return "wrapped, replay"
	}
	return name
}
