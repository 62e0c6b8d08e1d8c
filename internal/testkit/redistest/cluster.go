package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// slots is the number of hash slots of a Redis Cluster.
const slots = 16384

// StartClusterT starts a Redis Cluster of n private servers for t alone,
// each a primary holding an equal share of the slots (no replicas), and
// returns them in slot order: the first holds slot 0. They are stopped when
// t ends. Each server's cluster bus gets a free port of its own
// (--cluster-port), so that no port is derived from another.
func StartClusterT(t testing.TB, n int) []*Server {
	t.Helper()
	if n < 1 {
		t.Fatalf("redistest: a cluster of %d servers", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nodes := make([]*Server, n)
	clients := make([]*redis.Client, n)
	buses := make([]int, n)
	for i := range nodes {
		bus, err := pgtest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		buses[i] = bus
		nodes[i] = StartT(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus))
		clients[i] = redis.NewClient(&redis.Options{Addr: nodes[i].Addr})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	for i, c := range clients {
		first, last := i*slots/n, (i+1)*slots/n-1
		if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			t.Fatalf("redistest: assigning slots %d-%d to %s: %v", first, last, nodes[i].Addr, err)
		}
	}
	for i, s := range nodes[1:] {
		host, port, _ := strings.Cut(s.Addr, ":")
		if err := clients[0].Do(ctx, "CLUSTER", "MEET", host, port, buses[i+1]).Err(); err != nil {
			t.Fatalf("redistest: CLUSTER MEET %s: %v", s.Addr, err)
		}
	}
	want := "cluster_known_nodes:" + strconv.Itoa(n)
	for i, c := range clients {
		for {
			info, err := c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, want+"\r\n") {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("redistest: the cluster never became ok on %s: %v\n%s", nodes[i].Addr, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nodes
}
