package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
)

// peerKey carries a connection's peer credentials in its requests' context.
type peerKey struct{}

// peerCred reads who is on the other end of a unix socket connection.
func peerCred(c net.Conn) *unix.Ucred {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err != nil {
		return nil
	}
	return cred
}

// rootOnly answers only root (and the daemon's own user, when it runs
// as another user with capabilities; see peerAllowed): the socket's mode
// already says so, the peer credentials make sure. Anyone else gets a 403 that says why, rather
// than a closed connection.
func rootOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cred, _ := r.Context().Value(peerKey{}).(*unix.Ucred)
		if cred == nil || !peerAllowed(cred.Uid) {
			who := "unknown peer"
			if cred != nil {
				who = fmt.Sprintf("uid %d", cred.Uid)
			}
			writeJSON(w, http.StatusForbidden, api.Reply{Error: peerRefusal(who)})
			return
		}
		if r.Method != http.MethodGet {
			// A request's body arrives in time or not at all: a client
			// that stops sending must not hold a connection forever.
			// (Not for GETs: the monitor streams for as long as it likes.)
			http.NewResponseController(w).SetReadDeadline(time.Now().Add(bodyTimeout))
		}
		next.ServeHTTP(w, r)
	})
}

func (d *Daemon) serve(socket string) (*http.Server, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, err
	}
	// A socket file nobody answers on is left over from a crash.
	if c, err := net.DialTimeout("unix", socket, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("another daemon already listens on %s", socket)
	}
	os.Remove(socket)
	ln, err := net.Listen("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", socket, err)
	}
	if err := os.Chmod(socket, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, d.Status())
	})
	mux.HandleFunc("POST /v1/prefer", func(w http.ResponseWriter, r *http.Request) {
		var req api.PreferRequest
		if err := decode(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		msg, err := d.setHint(req.Targets, req.Clear)
		if err != nil {
			writeErr(w, err)
			return
		}
		d.log.Printf("prefer: %s", msg)
		writeJSON(w, http.StatusOK, api.Reply{OK: true, Message: msg})
	})
	mux.HandleFunc("POST /v1/policies", func(w http.ResponseWriter, r *http.Request) {
		var req api.ApplyRequest
		if err := decode(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		if !filepath.IsAbs(req.File) {
			// The daemon runs from its own directory: SIGHUP must find
			// the same file that status shows.
			writeErr(w, fmt.Errorf("file %q is not an absolute path (the daemon records it and SIGHUP reloads it)", req.File))
			return
		}
		msg, err := d.reload(req.File, []byte(req.Config))
		d.ops.reloaded("policy apply", msg, err) // metrics, monitor
		if err != nil {
			writeErr(w, err)
			return
		}
		d.log.Printf("policy apply: %s", msg)
		writeJSON(w, http.StatusOK, api.Reply{OK: true, Message: msg})
	})
	for _, h := range extraHandlers {
		h(d, mux)
	}
	srv := &http.Server{Handler: rootOnly(mux), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerCred(c))
		}}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			d.log.Printf("api: %v", err)
		}
	}()
	return srv, nil
}

// extraHandlers let other parts (the datapath's chains) add endpoints.
var extraHandlers []func(d *Daemon, mux *http.ServeMux)

// The API's limits: a request body (a config, a chain) is small; a client
// sending one slower than bodyTimeout, or idle between requests longer
// than idleTimeout, is cut off.
const maxRequestBody = 1 << 20

var (
	bodyTimeout = 10 * time.Second // a variable for tests
	idleTimeout = 60 * time.Second
)

func decode(r *http.Request, v any) error {
	// Read no more than the limit (and one byte to tell): a larger body is
	// refused as such, not cut into a JSON error, and never held whole in
	// memory.
	b, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		return fmt.Errorf("bad request: %w", err)
	}
	if len(b) > maxRequestBody {
		return fmt.Errorf("bad request: the body is over %d KiB (a config or chain is far smaller)", maxRequestBody>>10)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("bad request: %w", err)
	}
	return nil
}

func writeErr(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusBadRequest, api.Reply{Error: err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
