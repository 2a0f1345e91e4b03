package traffic

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// loopbackPair is a TCP connection over loopback: the dialled end and the
// accepted one.
func loopbackPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestReceiveBlockingReadsEverything(t *testing.T) {
	client, server := loopbackPair(t)
	const size = 3<<20 + 17
	go func() {
		client.Write(make([]byte, size))
		client.(*net.TCPConn).CloseWrite()
	}()
	var m Meter
	if err := receiveBlocking(context.Background(), server, &m); err != nil {
		t.Fatal(err)
	}
	if m.Bytes() != size {
		t.Fatalf("read %d B, want %d B", m.Bytes(), size)
	}
}

func TestReceiveBlockingEndsWithItsContext(t *testing.T) {
	_, server := loopbackPair(t) // the sender never writes nor closes
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		var m Meter
		done <- receiveBlocking(ctx, server, &m)
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the context's deadline", err)
		}
	case <-time.After(300*time.Millisecond + 5*blockingPoll):
		t.Fatal("a blocking reader did not see its context end")
	}
}
