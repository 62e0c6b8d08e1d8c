package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// On a virtual machine whose idle cores sleep, a loopback round trip is
// slow: each end waits for its core to wake. When the machine is busy the
// same round trip is several times faster, and what the client adds to it
// weighs more. Section 1e measures its sides in both states: as the machine
// is, and with its cores kept awake by a busy loop at the lowest priority
// (nice 19). The scheduler hands a core to a woken thread of normal
// priority, so the round trips run at their fastest; now and then a wake-up
// waits behind the loop for a scheduler tick, which shows in the p99s of
// that state, not in its p50s, the figures judged. (A loop under
// SCHED_IDLE instead left the round trips nearly as slow as on an idle
// machine: PING about 0.05–0.06 ms against 0.03 ms at nice 19.)

// envAwake, set in the environment of this program, makes it the busy loop
// instead of the bench.
const envAwake = "ICHIDO_BENCH_AWAKE"

// runAwakeLoop spins on every core at nice 19 until it is killed, or until
// its parent dies.
func runAwakeLoop() {
	if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, 19); err != nil {
		fmt.Fprintln(os.Stderr, "bench: busy loop: setpriority:", err)
		os.Exit(1)
	}
	for range runtime.NumCPU() - 1 {
		go spin()
	}
	spin()
}

func spin() {
	//lint:ignore SA5002 spinning is the point: it keeps a core out of idle
	for {
	}
}

// keepAwake starts the busy loop (this program again, with envAwake set)
// and returns the function that stops it.
func keepAwake(ctx context.Context) (stop func() error, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), envAwake+"=1")
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the busy loop: %w", err)
	}
	return func() error {
		// Signal 0 checks that the loop still runs: one that died early
		// would leave the "awake" figures measured on an idle machine.
		alive := cmd.Process.Signal(syscall.Signal(0)) == nil
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if !alive {
			return fmt.Errorf("the busy loop exited before the measurement ended: %v", cmd.ProcessState)
		}
		return nil
	}, nil
}
