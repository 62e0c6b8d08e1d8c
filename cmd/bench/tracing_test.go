package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseBenchOutput(t *testing.T) {
	t.Parallel()
	out := `goos: linux
goarch: amd64
pkg: github.com/ichido/ichido/pkg/idempotency/otelidem
cpu: Some CPU @ 2.00GHz
BenchmarkFirstCall/unprotected-2         	 9876543	       121.5 ns/op	      64 B/op	       2 allocs/op
BenchmarkReplay/otelidem=sdk
BenchmarkReplay/otelidem=sdk-2           	  100000	     10234 ns/op	    5120 B/op	      61 allocs/op
BenchmarkReplay/observer=nil             	  200000	      6000 ns/op	    3000 B/op	      40 allocs/op
PASS
ok  	github.com/ichido/ichido/pkg/idempotency/otelidem	3.2s
`
	lines, err := parseBenchOutput(out)
	require.NoError(t, err)
	require.Equal(t, []benchLine{
		{name: "BenchmarkFirstCall/unprotected", nsPerOp: 121.5, bytesPerOp: 64, allocsPerOp: 2},
		{name: "BenchmarkReplay/otelidem=sdk", nsPerOp: 10234, bytesPerOp: 5120, allocsPerOp: 61},
		{name: "BenchmarkReplay/observer=nil", nsPerOp: 6000, bytesPerOp: 3000, allocsPerOp: 40},
	}, lines)

	_, err = parseBenchOutput("BenchmarkReplay/observer=nil-2 100 6000 ns/op\n")
	require.ErrorContains(t, err, "-benchmem")
}
