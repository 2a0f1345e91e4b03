package daemon

import (
	"bytes"
	"io"
	"log"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A body over the limit is refused as too large, without reading it all
// (it was read up to 16 MiB and cut into a JSON error; a 64 MiB request
// grew the daemon by 50 MB, found by internal/reliability).
func TestDecodeRefusesLargeBodies(t *testing.T) {
	var v map[string]any
	big := bytes.Repeat([]byte(" "), maxRequestBody+10)
	r, _ := http.NewRequest(http.MethodPost, "/v1/policies", bytes.NewReader(big))
	if err := decode(r, &v); err == nil || !strings.Contains(err.Error(), "over 1024 KiB") {
		t.Fatalf("large body: %v", err)
	}
	ok := append(bytes.Repeat([]byte(" "), maxRequestBody-2), '{', '}')
	r, _ = http.NewRequest(http.MethodPost, "/v1/policies", bytes.NewReader(ok))
	if err := decode(r, &v); err != nil {
		t.Fatalf("a body of exactly the limit: %v", err)
	}
}

// A client that sends headers and then no body is cut off (it held its
// connection and a goroutine forever, found by internal/reliability).
func TestSlowBodyIsCutOff(t *testing.T) {
	old := bodyTimeout
	bodyTimeout = 200 * time.Millisecond
	defer func() { bodyTimeout = old }()
	d := &Daemon{log: log.New(io.Discard, "", 0)}
	sock := filepath.Join(t.TempDir(), "d.sock")
	srv, err := d.serve(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write([]byte("POST /v1/prefer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the daemon still holds a request whose body stopped coming (read %q)", b)
	}
	if !bytes.HasPrefix(b, []byte("HTTP/1.1 400")) {
		t.Fatalf("answer %q, want a 400 saying the request was bad", b)
	}
}
