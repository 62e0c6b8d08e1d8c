package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// Machine describes where the numbers were taken.
type Machine struct {
	CPUs      int    `json:"nproc"`
	CPUModel  string `json:"cpu_model"`
	MemTotal  string `json:"mem_total"`
	Kernel    string `json:"kernel"`
	GoVersion string `json:"go_version"`
	GOOS      string `json:"goos"`
	GOARCH    string `json:"goarch"`
	// LoadStart and LoadEnd are /proc/loadavg when the run started and ended.
	LoadStart string `json:"loadavg_start"`
	LoadEnd   string `json:"loadavg_end"`
}

func describeMachine() Machine {
	m := Machine{
		CPUs:      runtime.NumCPU(),
		GoVersion: runtime.Version(),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
		CPUModel:  procField("/proc/cpuinfo", "model name"),
		MemTotal:  procField("/proc/meminfo", "MemTotal"),
		LoadStart: loadavg(),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// procField returns the value of the first "name: value" line of a /proc file.
func procField(path, name string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == name {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Calibration is a fixed CPU workload (SHA-256 over 16 MiB) timed again and
// again through the run: on a quiet machine it takes the same time every
// time, so its coefficient of variation says how noisy the machine was.
type Calibration struct {
	Points []CalibrationPoint `json:"points"`
	// CVPct is the coefficient of variation of every point's duration.
	CVPct float64 `json:"cv_pct"`
	// IQRPct is the interquartile range over the median: the same, less
	// swayed by a few outliers.
	IQRPct   float64 `json:"iqr_pct"`
	MedianMs float64 `json:"median_ms"`
	MinMs    float64 `json:"min_ms"`
	MaxMs    float64 `json:"max_ms"`
}

// CalibrationPoint is one timing of the workload.
type CalibrationPoint struct {
	// At is the section the run was in.
	At string  `json:"at"`
	Ms float64 `json:"ms"`
	// Seconds since the run started.
	Seconds float64 `json:"t_s"`
}

var calibrationData = make([]byte, 1<<20)

func (c *Calibration) measure(at string, n int, start time.Time) {
	for range n {
		d, _ := timed(func() error {
			for range 16 {
				sum := sha256.Sum256(calibrationData)
				calibrationData[0] = sum[0]
			}
			return nil
		})
		c.Points = append(c.Points, CalibrationPoint{At: at, Ms: ms(d), Seconds: time.Since(start).Seconds()})
	}
	var xs []float64
	for _, p := range c.Points {
		xs = append(xs, p.Ms)
	}
	c.CVPct, c.IQRPct, c.MedianMs = cv(xs), relIQR(xs), median(xs)
	c.MinMs, c.MaxMs = quantile(xs, 0), quantile(xs, 1)
}

// postgresSettings are the server settings the report records.
var postgresSettings = []string{
	"server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes",
	"shared_buffers", "wal_level", "max_wal_size", "checkpoint_timeout", "max_connections",
}

func serverSettings(ctx context.Context, pool *pgxpool.Pool) map[string]string {
	out := map[string]string{}
	for _, name := range postgresSettings {
		var v string
		if err := pool.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&v); err != nil {
			v = "unknown"
		}
		out[name] = v
	}
	return out
}

func redisSettings(ctx context.Context, client *redis.Client) map[string]string {
	out := map[string]string{}
	for _, name := range []string{"appendonly", "appendfsync", "save", "maxmemory-policy"} {
		v, err := client.ConfigGet(ctx, name).Result()
		if err != nil {
			out[name] = "unknown"
			continue
		}
		out[name] = v[name]
	}
	if info, err := client.Info(ctx, "server").Result(); err == nil {
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
				out["redis_version"] = v
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "valkey_version:"); ok {
				out["valkey_version"] = v
			}
		}
	}
	return out
}
