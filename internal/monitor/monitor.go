// Package monitor is the daemon's monitor stream: GET /v1/monitor on the
// API socket (root only, like every request) answers with
// newline-delimited JSON, one api.MonitorEvent per line, as things happen:
// path-manager events, the daemon's actions and their outcomes, policies'
// changed verdicts, reloads. A Hub hands events to every client without
// ever blocking the daemon.
package monitor

import (
	"encoding/json"
	"net/http"
	"os"
	"sync"
	"time"

	"mpsteer/internal/api"
)

// Buffer is how many events a client may fall behind before it loses
// some (and is told how many).
const Buffer = 4096

// Hub fans events out to the clients of the stream. A nil *Hub publishes
// nothing.
type Hub struct {
	mu     sync.Mutex
	subs   map[*sub]struct{}
	closed bool
}

type sub struct {
	ch      chan api.MonitorEvent
	dropped int // guarded by the hub's mu
	done    chan struct{}
}

// NewHub makes a hub with no clients.
func NewHub() *Hub { return &Hub{subs: map[*sub]struct{}{}} }

// Active reports whether anyone listens (events are built only then).
func (h *Hub) Active() bool { return h.Count() > 0 }

// Count is the number of clients.
func (h *Hub) Count() int {
	if h == nil {
		return 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// Publish hands ev to every client without ever blocking: a client whose
// buffer is full loses the event and hears of it later.
func (h *Hub) Publish(ev api.MonitorEvent) {
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

func (h *Hub) subscribe() *sub {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := &sub{ch: make(chan api.MonitorEvent, Buffer), done: make(chan struct{})}
	if h.closed {
		close(s.done)
		return s
	}
	h.subs[s] = struct{}{}
	return s
}

func (h *Hub) unsubscribe(s *sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.subs[s]; ok {
		delete(h.subs, s)
		close(s.done)
	}
}

// Close ends every stream (the daemon is stopping); what is buffered
// still goes out.
func (h *Hub) Close() {
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

// Serve streams the hub's events to one client until it goes or the hub
// closes; the first line says which daemon (netns) it is.
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, netns string) {
	s := h.subscribe()
	defer h.unsubscribe(s)
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
	if !write(api.MonitorEvent{At: time.Now(), Type: api.MonitorHello, PID: os.Getpid(), NetNS: netns}) {
		return
	}
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.done:
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
