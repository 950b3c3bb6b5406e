package serve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrPrivateTarget is returned for a target on a loopback, private,
// link-local, unspecified or multicast address, or one of the server's
// own, while private targets are not allowed: the server must not become
// a proxy into its own network.
var ErrPrivateTarget = errors.New("targets on loopback, private and link-local addresses are refused (riverslot serve --allow-private-targets allows them)")

// privateAddr reports whether a is an address the guard refuses: an
// IPv4 form of one inside IPv6 (mapped, compatible, 6to4, NAT64) is
// judged by the IPv4 address it carries.
func privateAddr(a netip.Addr) bool {
	a = a.Unmap()
	if a.Is6() {
		b := a.As16()
		switch {
		case [12]byte(b[:12]) == [12]byte{} && !a.IsLoopback() && !a.IsUnspecified(): // ::a.b.c.d, IPv4-compatible
			return privateAddr(netip.AddrFrom4([4]byte(b[12:16])))
		case b[0] == 0x20 && b[1] == 0x02: // 2002:a.b.c.d::/48, 6to4
			return privateAddr(netip.AddrFrom4([4]byte(b[2:6])))
		case nat64.Contains(a): // 64:ff9b::a.b.c.d, NAT64
			return privateAddr(netip.AddrFrom4([4]byte(b[12:16])))
		}
	}
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

var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// blocked are further ranges that reach this network, or none: "this
// network", carrier-grade NAT, IETF protocol assignments, benchmarking,
// reserved; local-use NAT64, Teredo (an IPv4 address obfuscated inside),
// deprecated site-local.
var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("fec0::/10"),
}

// ownAddrs are this machine's interface addresses (public ones too: a
// service on a public address of the server is its own), read again
// after a minute.
var ownAddrs struct {
	sync.Mutex
	set  map[netip.Addr]bool
	read time.Time
}

func ownAddr(a netip.Addr) bool {
	ownAddrs.Lock()
	defer ownAddrs.Unlock()
	if ownAddrs.set == nil || time.Since(ownAddrs.read) > time.Minute {
		ownAddrs.set, ownAddrs.read = map[netip.Addr]bool{}, time.Now()
		if addrs, err := net.InterfaceAddrs(); err == nil {
			for _, ad := range addrs {
				if p, err := netip.ParsePrefix(ad.String()); err == nil {
					ownAddrs.set[p.Addr().Unmap()] = true
				}
			}
		}
	}
	return ownAddrs.set[a.Unmap()]
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

// targetError is CheckURL's refusal of a target: Error is its own message,
// fit for the API's caller; Unwrap the error beneath it (the URL parser's,
// the resolver's), for the server's log only.
type targetError struct {
	msg   string
	cause error
}

func (e *targetError) Error() string { return e.msg }
func (e *targetError) Unwrap() error { return e.cause }

// CheckURL returns an error naming the problem with a schedule's url: not
// http or https, no host, credentials in it, or (unless allowed) a host
// that is or resolves to an address the guard refuses. Nothing is
// connected to. The error's text is fixed (the host named, never the
// parser's or the resolver's text); errors.Unwrap gives their error.
func (g *Guard) CheckURL(ctx context.Context, raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, &targetError{msg: "is not a URL: give one such as https://api.example.com/hook", cause: err}
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
		if privateAddr(a) || ownAddr(a) {
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
		// The resolver's error names the server's DNS server and network:
		// the message is fixed, the cause unwraps.
		return nil, &targetError{msg: fmt.Sprintf("host %q does not resolve: check the name, or try again if it was just made", host), cause: err}
	}
	for _, a := range addrs {
		if privateAddr(a) || ownAddr(a) {
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
	if privateAddr(ap.Addr()) || ownAddr(ap.Addr()) {
		return fmt.Errorf("riverslot: refusing to connect to %s: %w", address, ErrPrivateTarget)
	}
	return nil
}
