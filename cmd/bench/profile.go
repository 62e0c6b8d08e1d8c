package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/pprof/profile"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ReplayProfile is where the CPU of replays at several clients goes: the
// client's (this process, from its resource usage, split by a CPU profile
// taken meanwhile) and the server's (the CPU time of the backends that
// served the pool, from /proc), per replay.
type ReplayProfile struct {
	Side    string  `json:"side"`
	Clients int     `json:"clients"`
	Ops     int     `json:"ops"`
	Seconds float64 `json:"seconds"`
	// ClientUs and ServerUs are CPU microseconds per replay.
	ClientUs float64 `json:"client_us"`
	ServerUs float64 `json:"server_us,omitempty"`
	// ServerStatementUs is the server's time inside the statement per
	// replay (pg_stat_statements planning + execution, wall-clock).
	ServerStatementUs float64 `json:"server_statement_us,omitempty"`
	// Client splits ClientUs by what the samples were doing.
	Client []ProfileShare `json:"client"`
	// ServerNote says why ServerUs is missing, when it is.
	ServerNote string `json:"server_note,omitempty"`
}

// ProfileShare is one part of the client's CPU.
type ProfileShare struct {
	Part  string  `json:"part"`
	Us    float64 `json:"us_per_op"`
	Share float64 `json:"share_pct"`
}

// replayProfileFile is the CPU profile of profileReplay, beside the report.
const replayProfileFile = "replay-profile.pb.gz"

// profileReplay runs s on clients clients for a few seconds with the CPU
// profiler on and reads both sides' CPU time around it.
func (b *bench) profileReplay(ctx context.Context, pool *pgxpool.Pool, s sideSpec, clients int) (*ReplayProfile, error) {
	dur := 3 * time.Second
	if b.cfg.quick {
		dur = time.Second
	}
	pids, err := backendPIDs(ctx, pool)
	if err != nil {
		return nil, err
	}
	admin, err := pgxpool.New(ctx, b.db.baseURL)
	if err != nil {
		return nil, err
	}
	defer admin.Close()
	stats := true
	if _, err := admin.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		stats = false
	}
	serverBefore, serverErr := procCPU(pids)
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, err
	}
	clientBefore := rusageCPU()
	start := time.Now()
	run := load(ctx, clients, dur, b.cfg.maxOps, s.op)
	elapsed := time.Since(start)
	clientCPU := rusageCPU() - clientBefore
	pprof.StopCPUProfile()
	serverAfter, serverErr2 := procCPU(pids)
	if run.Ops == 0 {
		return nil, fmt.Errorf("no replay ran: %s", run.FirstError)
	}
	pr := &ReplayProfile{Side: s.name, Clients: clients, Ops: run.Ops, Seconds: elapsed.Seconds(),
		ClientUs: float64(clientCPU.Microseconds()) / float64(run.Ops)}
	switch {
	case serverErr != nil:
		pr.ServerNote = serverErr.Error()
	case serverErr2 != nil:
		pr.ServerNote = serverErr2.Error()
	default:
		pr.ServerUs = float64((serverAfter - serverBefore).Microseconds()) / float64(run.Ops)
	}
	if stats {
		var us float64
		if err := admin.QueryRow(ctx, `SELECT coalesce(sum(total_plan_time + total_exec_time), 0) * 1000 FROM pg_stat_statements
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT ILIKE '%pg_stat_statements%'`).Scan(&us); err == nil {
			pr.ServerStatementUs = us / float64(run.Ops)
		}
	}
	if b.plots != "" {
		// Kept beside the report, for `go tool pprof`.
		if err := os.WriteFile(filepath.Join(b.plots, replayProfileFile), buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		return nil, fmt.Errorf("reading the profile: %w", err)
	}
	pr.Client = splitProfile(p, pr.ClientUs)
	return pr, nil
}

// backendPIDs returns the server process of each of the pool's
// connections, opening all of them.
func backendPIDs(ctx context.Context, pool *pgxpool.Pool) ([]int, error) {
	n := int(pool.Config().MaxConns)
	conns := make([]*pgxpool.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var pids []int
	for range n {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
		var pid int
		if err := c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			return nil, err
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// procCPU sums the user and system CPU time of processes, from /proc.
func procCPU(pids []int) (time.Duration, error) {
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, fmt.Errorf("the server's processes cannot be read here (%v)", err)
		}
		// The fields after the command name, which is in parentheses.
		i := bytes.LastIndexByte(raw, ')')
		fields := strings.Fields(string(raw[i+1:]))
		if len(fields) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat is short", pid)
		}
		// utime and stime are fields 14 and 15 of the line, 12 and 13 here.
		for _, f := range fields[11:13] {
			v, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return 0, err
			}
			ticks += v
		}
	}
	// The kernel's USER_HZ is 100 on Linux.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// rusageCPU is this process's user and system CPU time so far.
func rusageCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// profileParts names what a sample was doing, tested on its frames from
// the innermost out; the first part that matches takes the sample. A
// sample none matches goes to the package of its innermost frame outside
// the runtime (profileOwner).
var profileParts = []struct {
	part     string
	prefixes []string
}{
	{"network system calls (send, receive)", []string{"syscall.", "internal/poll.", "internal/runtime/syscall.", "runtime/internal/syscall.", "net."}},
	{"scheduler, waking and parking goroutines", []string{"runtime.schedule", "runtime.findRunnable", "runtime.netpoll", "runtime.futex", "runtime.notesleep", "runtime.notewakeup", "runtime.stopm", "runtime.startm", "runtime.wakep", "runtime.park_m", "runtime.goready", "runtime.ready", "runtime.usleep", "runtime.osyield", "runtime.runqgrab", "runtime.stealWork", "runtime.mcall", "runtime.gopark", "runtime.casgstatus"}},
	{"memory: allocation", []string{"runtime.mallocgc", "runtime.newobject", "runtime.makeslice", "runtime.growslice", "runtime.makemap", "runtime.rawstring", "runtime.concatstring", "runtime.slicebytetostring"}},
}

// splitProfile shares totalUs out by the profile's samples.
func splitProfile(p *profile.Profile, totalUs float64) []ProfileShare {
	idx := len(p.SampleType) - 1 // cpu nanoseconds
	byPart := map[string]int64{}
	var total int64
	for _, s := range p.Sample {
		v := s.Value[idx]
		total += v
		byPart[classifySample(s)] += v
	}
	if total == 0 {
		return nil
	}
	shares := make([]ProfileShare, 0, len(byPart))
	for part, v := range byPart {
		f := float64(v) / float64(total)
		shares = append(shares, ProfileShare{Part: part, Us: f * totalUs, Share: 100 * f})
	}
	sort.Slice(shares, func(i, j int) bool { return shares[i].Us > shares[j].Us })
	return shares
}

func classifySample(s *profile.Sample) string {
	var funcs []string
	for _, loc := range s.Location {
		for i := len(loc.Line) - 1; i >= 0; i-- { // inlined frames first
			if f := loc.Line[i].Function; f != nil {
				funcs = append(funcs, f.Name)
			}
		}
	}
	for _, f := range funcs {
		switch {
		case strings.HasPrefix(f, "runtime.gcBgMarkWorker"), strings.HasPrefix(f, "runtime.bgsweep"), strings.HasPrefix(f, "runtime.bgscavenge"), strings.HasPrefix(f, "runtime.gcAssistAlloc"):
			return "memory: garbage collection"
		case strings.HasPrefix(f, "os.(*File).Write"):
			// The log and metric lines, written where Lambda reads them.
			return "decorator: log and metric lines"
		}
	}
	for _, f := range funcs {
		if f == "time.now" || f == "time.Now" || f == "time.runtimeNow" || f == "time.runtimeNano" {
			return "clock reads (time.Now)"
		}
		for _, part := range profileParts {
			for _, prefix := range part.prefixes {
				if strings.HasPrefix(f, prefix) {
					return part.part
				}
			}
		}
		if owner := profileOwner(f); owner != "" {
			return owner
		}
	}
	return "runtime and standard library, other"
}

// profileOwner names the part of the program a function belongs to, or ""
// for the runtime and the standard library, whose work goes to the caller
// that asked for it.
func profileOwner(f string) string {
	const lib = "github.com/ichido/ichido/pkg/idempotency"
	switch {
	case strings.HasPrefix(f, "github.com/jackc/pgx/v5/pgxpool"), strings.HasPrefix(f, "github.com/jackc/puddle"):
		return "pgxpool: acquiring and releasing connections"
	case strings.HasPrefix(f, "github.com/jackc/pgx"):
		return "pgx: encoding the call, decoding the answer"
	case strings.HasPrefix(f, "database/sql"):
		return "database/sql: its pool and driver calls"
	case strings.HasPrefix(f, lib+"/pgstore"):
		return "pgstore: the envelope, the answer"
	case strings.Contains(f, "idempotency.(*decorator).fingerprint"), strings.HasPrefix(f, lib+".Fingerprint"), strings.HasPrefix(f, lib+"/internal/canonjson"):
		return "decorator: the request's fingerprint"
	case strings.HasPrefix(f, "log/slog"), strings.HasPrefix(f, "encoding/json"), strings.HasPrefix(f, lib+"/internal/emf"), strings.Contains(f, "(*observation).emit"), strings.HasPrefix(f, lib+"/observe"):
		return "decorator: log and metric lines"
	case strings.HasPrefix(f, lib):
		return "decorator: the rest (key, user, owner, lease, answer)"
	case strings.HasPrefix(f, "main."):
		return "bench harness"
	}
	return ""
}
