package monitor

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
)

func TestMonitorHubDropsForSlowClientsAndSaysSo(t *testing.T) {
	h := NewHub()
	s := h.subscribe()
	for i := 0; i < Buffer+10; i++ {
		h.Publish(api.MonitorEvent{Type: api.MonitorPM})
	}
	for i := 0; i < Buffer; i++ {
		<-s.ch
	}
	h.Publish(api.MonitorEvent{Type: api.MonitorAction})
	if ev := <-s.ch; ev.Type != api.MonitorDropped || ev.Dropped != 10 {
		t.Fatalf("after the buffer drained: %+v, want a dropped notice of 10", ev)
	}
	if ev := <-s.ch; ev.Type != api.MonitorAction {
		t.Fatalf("then %+v, want the action", ev)
	}
	h.Close()
	select {
	case <-s.done:
	default:
		t.Fatal("close did not end the subscription")
	}
}

// The stream over HTTP: a hello line, then one JSON object per event.
func TestMonitorStream(t *testing.T) {
	h := NewHub()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.Serve(w, r, "test-ns") }))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/x-ndjson" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	next := func() api.MonitorEvent {
		t.Helper()
		if !sc.Scan() {
			t.Fatalf("stream ended: %v", sc.Err())
		}
		var ev api.MonitorEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		return ev
	}
	if ev := next(); ev.Type != api.MonitorHello || ev.NetNS != "test-ns" {
		t.Fatalf("first line %+v", ev)
	}
	// The hello line came after the subscription: events published now
	// reach this client.
	if !h.Active() {
		t.Fatal("the client is not subscribed after its hello line")
	}
	bk := true
	h.Publish(api.MonitorEvent{At: time.Now(), Type: api.MonitorAction, Action: &api.ActionRecord{At: time.Now(), Kind: "backup", Policy: "prefer", Target: "10.2.0.1:1→10.9.0.2:5201", Backup: &bk, Result: "applied", Reason: "why"}})
	ev := next()
	if ev.Type != api.MonitorAction || ev.Action == nil || ev.Action.Policy != "prefer" || !strings.Contains(ev.String(), "backup=true") {
		t.Fatalf("action line %+v", ev)
	}
	no := false
	h.Publish(api.MonitorEvent{At: time.Now(), Type: api.MonitorReload, Trigger: "SIGHUP", Applied: &no})
	if ev := next(); ev.Type != api.MonitorReload || ev.Applied == nil || *ev.Applied || ev.Trigger != "SIGHUP" {
		t.Fatalf("reload line %+v", ev)
	}
}
