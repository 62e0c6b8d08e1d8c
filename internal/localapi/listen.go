package localapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrNotLoopback is returned by Listen for an address that other machines
// could reach. The local gateway accepts any token without verifying it, so
// it must only be reachable from this machine.
var ErrNotLoopback = errors.New("localapi: the local API only listens on a loopback address (127.0.0.1, ::1 or localhost), because it does not verify tokens")

// ErrAddrInUse is returned by Listen when another process listens on the
// address already (often another local API still running).
var ErrAddrInUse = errors.New("localapi: the address is already in use")

// CheckLoopback returns ErrNotLoopback unless addr ("host:port") names a
// loopback host: a loopback IP, or "localhost". An empty host (all
// interfaces) is refused.
func CheckLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("localapi: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.IsLoopback() {
		return fmt.Errorf("%w: got %q", ErrNotLoopback, addr)
	}
	return nil
}

// Listen listens on addr after CheckLoopback. "localhost" is resolved to
// 127.0.0.1, so that the listener never depends on what the resolver says.
// An address another process holds is ErrAddrInUse.
func Listen(ctx context.Context, addr string) (net.Listener, error) {
	if err := CheckLoopback(addr); err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		addr = net.JoinHostPort("127.0.0.1", port)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%w: %s (%w)", ErrAddrInUse, addr, err)
	}
	return ln, err
}
