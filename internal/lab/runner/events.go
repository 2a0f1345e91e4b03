package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/pm"
)

// The scenario's timed events, applied to the running world.

func (r *variantRun) runEvents(ctx context.Context, events []scenario.Event) {
	for _, ev := range events {
		select {
		case <-time.After(r.t0 + ev.At - traffic.Now()):
		case <-ctx.Done():
			return
		}
		what := ev.Path
		if len(ev.Links) > 0 {
			what = strings.Join(ev.Links, ",")
		}
		rec := report.EventRecord{AtS: (traffic.Now() - r.t0).Seconds(), Path: what, Action: string(ev.Action), At: time.Now()}
		if err := r.applyEvent(ev, &rec); err != nil {
			rec.Error = err.Error()
			r.fail(fmt.Sprintf("event at %v on %s: %v", ev.At, what, err))
		}
		r.mu.Lock()
		r.events = append(r.events, rec)
		r.mu.Unlock()
	}
}

// ApplyEvent applies one event to a running world (also used by tests).
func ApplyEvent(w *world.World, ev scenario.Event) (string, error) {
	if len(ev.Links) > 0 {
		return w.ApplyLinkEvent(ev.Links, ev.Action, ev.Dir, ev.Patch)
	}
	p := w.Path(ev.Path)
	if p == nil {
		return "path not in this variant; skipped", nil
	}
	switch ev.Action {
	case scenario.ActSet:
		resp, err := world.Control(w.Dir, world.Request{Op: "set", Link: p.Link, Dir: ev.Dir, Patch: &ev.Patch})
		if err != nil {
			return "", err
		}
		st := resp.Links[p.Link]
		return "up " + st.Up.Params + "; down " + st.Down.Params, nil
	case scenario.ActDown, scenario.ActUp:
		_, err := world.Control(w.Dir, world.Request{Op: string(ev.Action), Link: p.Link, Dir: ev.Dir})
		return "", err
	case scenario.ActIfDown, scenario.ActIfUp:
		return w.SetInterface(p.Name, ev.Action == scenario.ActIfUp)
	case scenario.ActRemove:
		// The path disappears: the link goes dark and, as an interface
		// going away would make a path manager do, the client's endpoint
		// is deleted so that MPTCP closes the subflows on it.
		if _, err := world.Control(w.Dir, world.Request{Op: "down", Link: p.Link}); err != nil {
			return "", err
		}
		if p.Endpoint == nil || *p.Endpoint&pm.FlagSubflow == 0 {
			return "link down (initial path: no endpoint to delete)", nil
		}
		c, err := pm.Dial(pm.Options{NetNSName: w.Host(w.ClientRole()).NetNS})
		if err != nil {
			return "", err
		}
		defer c.Close()
		eps, err := c.Endpoints()
		if err != nil {
			return "", err
		}
		for _, e := range eps {
			if e.Addr == p.Client.Addr {
				return fmt.Sprintf("link down, endpoint id %d deleted", e.ID), c.DelEndpoint(e)
			}
		}
		return "link down (no endpoint found)", nil
	}
	return "", fmt.Errorf("unknown action %q", ev.Action)
}

func (r *variantRun) applyEvent(ev scenario.Event, rec *report.EventRecord) error {
	detail, err := ApplyEvent(r.w, ev)
	rec.Detail = detail
	return err
}
