package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrPrivateTarget is returned for a target on a loopback, private,
// link-local, unspecified or multicast address while private targets are
// not allowed: the server must not become a proxy into its own network.
var ErrPrivateTarget = errors.New("targets on loopback, private and link-local addresses are refused (riverslot serve --allow-private-targets allows them)")

// privateAddr reports whether a is an address the guard refuses.
func privateAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() {
		return true
	}
	for _, p := range blocked {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// blocked are further ranges that reach this network or none: carrier-grade
// NAT, IETF protocol assignments, benchmarking, "this network", reserved,
// IPv4-compatible/NAT64 forms of them are unmapped by the dialer's check.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
}

// Guard checks targets: a schedule's URL when it is created or changed,
// and every address a call connects to (after DNS), so that a name that
// resolves to a private address later is refused as well.
type Guard struct {
	// AllowPrivate lifts the rule (a test, or a server meant to call its
	// own network).
	AllowPrivate bool
	// Resolver looks names up (default net.DefaultResolver).
	Resolver *net.Resolver
}

// CheckURL returns an error naming the problem with a schedule's url: not
// http or https, no host, credentials in it, or (unless allowed) a host
// that is or resolves to an address the guard refuses. Nothing is
// connected to.
func (g *Guard) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("is not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("must be an http:// or https:// URL, got scheme %q", u.Scheme)
	}
	if u.Hostname() == "" {
		return nil, errors.New("must name a host, e.g. https://api.example.com/hook")
	}
	if u.User != nil {
		return nil, errors.New("must not carry credentials (user:password@); send them in headers")
	}
	if g.AllowPrivate {
		return u, nil
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if privateAddr(a) {
			return nil, ErrPrivateTarget
		}
		return u, nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return nil, ErrPrivateTarget
	}
	r := g.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(lctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("host %q does not resolve: %v", host, err)
	}
	for _, a := range addrs {
		if privateAddr(a) {
			return nil, ErrPrivateTarget
		}
	}
	return u, nil
}

// Control is a net.Dialer Control function that refuses, before the
// connection is made, an address the guard refuses.
func (g *Guard) Control(_, address string, _ syscall.RawConn) error {
	if g.AllowPrivate {
		return nil
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("riverslot: refusing to connect to %q: %w", address, err)
	}
	if privateAddr(ap.Addr()) {
		return fmt.Errorf("riverslot: refusing to connect to %s: %w", address, ErrPrivateTarget)
	}
	return nil
}
