package daemon

import (
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"time"

	"mpsteer/internal/api"
)

// The monitor stream: GET /v1/monitor on the API socket (root only, like
// every request) answers with newline-delimited JSON, one api.MonitorEvent
// per line, as things happen: path-manager events, the daemon's actions
// and their outcomes, policies' changed verdicts, reloads.

func init() {
	extraHandlers = append(extraHandlers, func(d *Daemon, mux *http.ServeMux) {
		mux.HandleFunc("GET "+api.MonitorPath, d.serveMonitor)
	})
}

// monitorBuffer is how many events a client may fall behind before it
// loses some (and is told how many).
const monitorBuffer = 4096

type monitorHub struct {
	mu     sync.Mutex
	subs   map[*monitorSub]struct{}
	closed bool
}

type monitorSub struct {
	ch      chan api.MonitorEvent
	dropped int // guarded by the hub's mu
	done    chan struct{}
}

func newMonitorHub() *monitorHub {
	return &monitorHub{subs: map[*monitorSub]struct{}{}}
}

// active reports whether anyone listens (events are built only then).
func (h *monitorHub) active() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs) > 0
}

func (h *monitorHub) count() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// publish hands ev to every client without ever blocking the daemon: a
// client whose buffer is full loses the event and hears of it later.
func (h *monitorHub) publish(ev api.MonitorEvent) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs {
		if s.dropped > 0 {
			select {
			case s.ch <- api.MonitorEvent{At: ev.At, Type: api.MonitorDropped, Dropped: s.dropped}:
				s.dropped = 0
			default:
				s.dropped++
				continue
			}
		}
		select {
		case s.ch <- ev:
		default:
			s.dropped++
		}
	}
}

func (h *monitorHub) subscribe() *monitorSub {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &monitorSub{ch: make(chan api.MonitorEvent, monitorBuffer), done: make(chan struct{})}
	if h.closed {
		close(s.done)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *monitorHub) unsubscribe(s *monitorSub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.done)
	}
}

// close ends every stream (the daemon is stopping).
func (h *monitorHub) close() {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for s := range h.subs {
		delete(h.subs, s)
		close(s.done)
	}
}

func (d *Daemon) serveMonitor(w http.ResponseWriter, r *http.Request) {
	if d.ops == nil {
		writeErr(w, errNoMonitor)
		return
	}
	hub := d.ops.hub
	s := hub.subscribe()
	defer hub.unsubscribe(s)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	write := func(ev api.MonitorEvent) bool {
		if enc.Encode(ev) != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(api.MonitorEvent{At: time.Now(), Type: api.MonitorHello, PID: os.Getpid(), NetNS: d.netns}) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
			// Stopping: what is buffered still goes out.
			for {
				select {
				case ev := <-s.ch:
					if !write(ev) {
						return
					}
				default:
					return
				}
			}
		case ev := <-s.ch:
			if !write(ev) {
				return
			}
		}
	}
}

type monitorError string

func (e monitorError) Error() string { return string(e) }

const errNoMonitor = monitorError("this daemon has no monitor")
