package apiserver

import (
	"bytes"
	"errors"
	"io"
	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"net"
	"net/http"
	"os"
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
	sock := filepath.Join(t.TempDir(), "d.sock")
	srv, err := Serve(sock, idleBackend{}, nil)
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

// idleBackend answers nothing of substance: the tests here are about the
// server's limits.
type idleBackend struct{}

func (idleBackend) Status() api.Status                    { return api.Status{} }
func (idleBackend) Prefer([]string, bool) (string, error) { return "", errors.New("no") }
func (idleBackend) Apply(string, []byte) (string, error)  { return "", errors.New("no") }
func (idleBackend) Datapath() (*datapath.Manager, error)  { return nil, errors.New("no") }
func (idleBackend) NetNS() string                         { return "test" }
func (idleBackend) Logf(string, ...any)                   {}

func TestPeerCheck(t *testing.T) {
	if !peerAllowed(0) || !peerAllowed(uint32(os.Geteuid())) {
		t.Fatal("root and the daemon's own user must be answered")
	}
	if os.Geteuid() == 0 && peerAllowed(65534) {
		t.Fatal("a daemon running as root answered uid 65534")
	}
	if msg := peerRefusal("uid 65534"); !strings.Contains(msg, "answers root only") || !strings.Contains(msg, "uid 65534") {
		t.Fatalf("refusal %q", msg)
	}
}
