// Package httplisten serves a command's HTTP handler on an address bound
// when the command starts, so that a bad address is refused before anything
// runs, and served once the command is ready:
//
//	ln, err := httplisten.Listen("127.0.0.1:0")
//	if err != nil {
//		return err
//	}
//	defer ln.Close()
//	// ... start what the handler reads ...
//	ln.Serve(handler)
//	fmt.Println("serving", ln.URL("/"))
package httplisten

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Listener is an address bound by Listen and served by Serve.
type Listener struct {
	listener net.Listener
	server   *http.Server
}

// Listen binds addr (host:port) over TCP.
func Listen(addr string) (*Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &Listener{listener: ln}, nil
}

// Addr is the address bound (with its port when addr gave port 0).
func (l *Listener) Addr() net.Addr { return l.listener.Addr() }

// URL is the http URL of path on the address bound.
func (l *Listener) URL(path string) string { return "http://" + l.listener.Addr().String() + path }

// Serve serves handler on the listener in a goroutine of its own, with
// bounded timeouts and header size.
func (l *Listener) Serve(handler http.Handler) {
	l.server = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute, WriteTimeout: 2 * time.Minute,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10}
	go func() {
		if err := l.server.Serve(l.listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err) // Serve on a bound listener fails only on a programming error
		}
	}()
}

// Close closes the listener, or, once served, shuts the server down within
// 5 s. Closing again does nothing more.
func (l *Listener) Close() {
	if l.server == nil {
		_ = l.listener.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = l.server.Shutdown(ctx)
}

// Loopback reports whether addr is a TCP address on this machine's
// loopback: a page without authentication bound elsewhere is reachable
// beyond it.
func Loopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
