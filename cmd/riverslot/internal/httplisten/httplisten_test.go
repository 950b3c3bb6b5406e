package httplisten

import (
	"io"
	"net"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/riverslot/riverslot/internal/testkit/riverslottest"
)

func TestMain(m *testing.M) { riverslottest.RunTests(m) }

// TestListener binds an address, serves a handler on it once, and closes
// it: afterwards nothing answers there.
func TestListener(t *testing.T) {
	t.Parallel()

	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	ln.Serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, r.URL.Path) }))
	url := ln.URL("/metrics")
	require.Regexp(t, `^http://127\.0\.0\.1:[1-9][0-9]*/metrics$`, url)

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, "/metrics", string(body))

	ln.Close()
	ln.Close() // closing again does nothing more
	_, err = client.Get(url)
	require.Error(t, err)
}

// TestListenerUnserved closes a listener never served: the address is free
// again.
func TestListenerUnserved(t *testing.T) {
	t.Parallel()

	ln, err := Listen("127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	again, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	require.NoError(t, again.Close())
}

func TestListenBadAddress(t *testing.T) {
	t.Parallel()

	_, err := Listen("127.0.0.1:notaport")
	require.Error(t, err)
}

func TestLoopback(t *testing.T) {
	t.Parallel()

	for _, tt := range []struct {
		addr net.Addr
		want bool
	}{
		{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, true},
		{&net.TCPAddr{IP: net.IPv6loopback}, true},
		{&net.TCPAddr{IP: net.IPv4zero}, false},
		{&net.TCPAddr{IP: net.IPv4(192, 168, 1, 2)}, false},
		{&net.UnixAddr{Name: "/tmp/s", Net: "unix"}, false},
	} {
		require.Equal(t, tt.want, Loopback(tt.addr), "%v", tt.addr)
	}
}
