package pgparams

import (
	"context"
	"net"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestEveryConnectionIsDialedToGiveUpOnADeadServer: the pool's dialer sets
// TCP_USER_TIMEOUT (the connection string's tcp_user_timeout wins, and is
// not sent to the server as a setting) and keepalives on each connection.
func TestEveryConnectionIsDialedToGiveUpOnADeadServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	for _, tt := range []struct {
		name, query string
		want        time.Duration
		wantErr     bool
	}{
		{"the default", "", TCPUserTimeoutDefault, false},
		{"the URL's", "&tcp_user_timeout=1500", 1500 * time.Millisecond, false},
		{"the kernel's", "&tcp_user_timeout=0", 0, false},
		{"not milliseconds", "&tcp_user_timeout=5s", 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pc, err := Pool{URL: "postgres://u:p@" + ln.Addr().String() + "/db?sslmode=disable" + tt.query}.Config()
			if tt.wantErr {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, sent := pc.ConnConfig.RuntimeParams["tcp_user_timeout"]; sent {
				t.Error("tcp_user_timeout would be sent to the server as a setting")
			}
			c, err := pc.ConnConfig.DialFunc(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			raw, err := c.(*net.TCPConn).SyscallConn()
			if err != nil {
				t.Fatal(err)
			}
			var ms, alive int
			var gerr error
			if err := raw.Control(func(fd uintptr) {
				ms, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
				if gerr == nil {
					alive, gerr = unix.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
				}
			}); err != nil || gerr != nil {
				t.Fatal(err, gerr)
			}
			if got := time.Duration(ms) * time.Millisecond; got != tt.want || alive != 1 {
				t.Errorf("TCP_USER_TIMEOUT %s, SO_KEEPALIVE %d; want %s, 1", got, alive, tt.want)
			}
		})
	}
}
