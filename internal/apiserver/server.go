// Package apiserver serves the daemon's API on its unix socket: HTTP with
// JSON bodies (internal/api holds the types and the client), answering
// root (and the daemon's own user) only. It asks the daemon through the
// Backend interface and streams the monitor hub's events.
package apiserver

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
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/monitor"
)

// Backend is the daemon, as the API asks it.
type Backend interface {
	Status() api.Status
	// Prefer sets (or clears) the user's preference: the prefer policy's
	// paths at run time.
	Prefer(targets []string, clear bool) (string, error)
	// Apply applies a config sent by `mpsteer policy apply`, all or
	// nothing; file is where it came from (SIGHUP reloads it).
	Apply(file string, data []byte) (string, error)
	// Datapath is the chains' manager, loaded on first use.
	Datapath() (*datapath.Manager, error)
	// NetNS names the daemon's namespace (the monitor's first line).
	NetNS() string
	Logf(format string, args ...any)
}

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

// peerAllowed: the API answers root and the user the daemon runs as. A
// daemon run as an unprivileged user with capabilities (the systemd unit)
// owns its socket (mode 0600), so that user reaches it anyway; root
// reaches every socket. Anyone else is refused.
func peerAllowed(uid uint32) bool {
	return uid == 0 || uid == uint32(os.Geteuid())
}

// peerRefusal says who may ask and who asked.
func peerRefusal(who string) string {
	if euid := os.Geteuid(); euid != 0 {
		return fmt.Sprintf("the mpsteer daemon answers root only, and the daemon's own user uid %d (this request came from %s): run the command as root", euid, who)
	}
	return fmt.Sprintf("the mpsteer daemon answers root only (this request came from %s): run the command as root", who)
}

// rootOnly answers only root (and the daemon's own user, when it runs as
// another user with capabilities): the socket's mode already says so, the
// peer credentials make sure. Anyone else gets a 403 that says why,
// rather than a closed connection.
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

// Server is the API on one socket.
type Server struct {
	srv    *http.Server
	socket string
}

// Serve listens on socket (refusing one another daemon answers on) and
// serves b's API until Close.
func Serve(socket string, b Backend, hub *monitor.Hub) (*Server, error) {
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
	routes(mux, b, hub)
	srv := &http.Server{Handler: rootOnly(mux), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: idleTimeout,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, peerKey{}, peerCred(c))
		}}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.Logf("api: %v", err)
		}
	}()
	return &Server{srv: srv, socket: socket}, nil
}

// Close stops answering and removes the socket.
func (s *Server) Close() error {
	err := s.srv.Close()
	os.Remove(s.socket)
	return err
}

// routes puts every endpoint of the API on mux.
func routes(mux *http.ServeMux, b Backend, hub *monitor.Hub) {
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, b.Status())
	})
	mux.HandleFunc("POST /v1/prefer", func(w http.ResponseWriter, r *http.Request) {
		var req api.PreferRequest
		if err := decode(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		msg, err := b.Prefer(req.Targets, req.Clear)
		if err != nil {
			writeErr(w, err)
			return
		}
		b.Logf("prefer: %s", msg)
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
		msg, err := b.Apply(req.File, []byte(req.Config))
		if err != nil {
			writeErr(w, err)
			return
		}
		b.Logf("policy apply: %s", msg)
		writeJSON(w, http.StatusOK, api.Reply{OK: true, Message: msg})
	})
	mux.HandleFunc("GET "+api.MonitorPath, func(w http.ResponseWriter, r *http.Request) {
		if hub == nil {
			writeErr(w, errors.New("this daemon has no monitor"))
			return
		}
		hub.Serve(w, r, b.NetNS())
	})
	chainRoutes(mux, b)
}

// chainRoutes are the datapath's chains and actors.
func chainRoutes(mux *http.ServeMux, b Backend) {
	withManager := func(w http.ResponseWriter, fn func(m *datapath.Manager) (any, error)) {
		m, err := b.Datapath()
		if err != nil {
			writeErr(w, err)
			return
		}
		v, err := fn(m)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
	id := func(r *http.Request) (uint32, error) {
		n, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("chain id %q is not a number", r.PathValue("id"))
		}
		return uint32(n), nil
	}
	mux.HandleFunc("GET /v1/chains", func(w http.ResponseWriter, r *http.Request) {
		withManager(w, func(m *datapath.Manager) (any, error) { return m.List(), nil })
	})
	mux.HandleFunc("POST /v1/chains", func(w http.ResponseWriter, r *http.Request) {
		var spec datapath.ChainSpec
		if err := decode(r, &spec); err != nil {
			writeErr(w, err)
			return
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			st, err := m.Add(spec)
			if err == nil {
				b.Logf("chain %d added on %s %s: select %q act %q", st.ID, spec.Dev, spec.Hook, spec.Select, spec.Act)
			}
			return st, err
		})
	})
	mux.HandleFunc("DELETE /v1/chains/{id}", func(w http.ResponseWriter, r *http.Request) {
		n, err := id(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			return map[string]any{"deleted": n}, m.Del(n)
		})
	})
	mux.HandleFunc("POST /v1/chains/{id}/{op}", func(w http.ResponseWriter, r *http.Request) {
		n, err := id(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		var req struct {
			Select string `json:"select"`
			Act    string `json:"act"`
			Before uint32 `json:"before"`
			After  uint32 `json:"after"`
		}
		if r.ContentLength > 0 {
			if err := decode(r, &req); err != nil {
				writeErr(w, err)
				return
			}
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			switch r.PathValue("op") {
			case "release":
				k, err := m.Release(n)
				return map[string]any{"released": k}, err
			case "replace":
				return m.Replace(n, req.Select, req.Act)
			case "move":
				return m.Move(n, req.Before, req.After)
			}
			return nil, fmt.Errorf("unknown chain operation %q (valid: release, replace, move)", r.PathValue("op"))
		})
	})
	mux.HandleFunc("POST /v1/actors", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			File string `json:"file"`
			Name string `json:"name"`
		}
		if err := decode(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			if err := m.LoadActor(req.File, req.Name); err != nil {
				return nil, err
			}
			b.Logf("actor %s loaded from %s", req.Name, req.File)
			return map[string]any{"loaded": req.Name}, nil
		})
	})
}

// The API's limits: a request body (a config, a chain) is small; a client
// sending one slower than bodyTimeout, or idle between requests longer
// than idleTimeout, is cut off.
const maxRequestBody = 1 << 20

var (
	bodyTimeout = 10 * time.Second // a variable for tests
	idleTimeout = 60 * time.Second
)

// decode reads a request's JSON body. It reads no more than the limit
// (and one byte to tell): a larger body is refused as such, not cut into a
// JSON error, and never held whole in memory.
func decode(r *http.Request, v any) error {
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
