package main

import (
	"fmt"
	"net"

	"github.com/riverslot/riverslot/cmd/riverslot/internal/httplisten"
)

// listenHTTP binds addr, given by flag (e.g. "--metrics-addr"), when the
// command starts, so that a bad address is refused before anything runs;
// example is a good value for the error message.
func listenHTTP(flag, addr, example string) (*httplisten.Listener, error) {
	ln, err := httplisten.Listen(addr)
	if err != nil {
		return nil, usageErr("%s %q: %v; give host:port, e.g. %s", flag, addr, err, example)
	}
	return ln, nil
}

// openWarning returns the warning to print when a page without
// authentication listens on addr beyond this machine ("" on loopback).
func openWarning(flag string, addr net.Addr) string {
	if httplisten.Loopback(addr) {
		return ""
	}
	return fmt.Sprintf("riverslot: warning: %s listens on %s, beyond this machine, and the operator's page has no authentication: whoever reaches the port reads task names, account ids and sync errors; keep it on 127.0.0.1 or behind a proxy that authenticates\n", flag, addr)
}
