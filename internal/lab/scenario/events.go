package scenario

import (
	"strings"
	"time"

	"mpsteer/internal/yamlcfg"
)

// Action is what an event does to a path.
type Action string

const (
	ActSet    Action = "set"
	ActDown   Action = "down"
	ActUp     Action = "up"
	ActRemove Action = "remove"
	// ActIfDown and ActIfUp take the client's interface of a path down
	// (carrier lost, address removed) and bring it back; ActDown and ActUp
	// are the silent kind, a blackhole the host does not see.
	ActIfDown Action = "ifdown"
	ActIfUp   Action = "ifup"
)

// Event changes a path, or core links, at a time.
type Event struct {
	At time.Duration
	// Path names the path the event changes; Links the core links it
	// changes instead, all at once (one of the two is set).
	Path   string
	Links  []string
	Action Action
	Dir    Dir
	Patch  Patch
	Line   int
}

// Dir selects link directions.
type Dir string

const (
	DirBoth Dir = "both"
	DirUp   Dir = "up"
	DirDown Dir = "down"
)

// eventContext is what events are checked against.
type eventContext struct {
	paths      map[string]bool // every path
	plain      map[string]bool // via-core paths built as plain veths
	core       *Core
	coreFailed bool // the core was given but its links are unknown
	dir        string
	// end is when the traffic ends (0 when unknown).
	end time.Duration
	// tenants is the tenants world (nil: paths); daemonHosts the hosts a
	// variant's daemon: may name.
	tenants     *Tenants
	daemonHosts []string
	// plugins is mptcpd's plugins, once looked up (variants.go).
	plugins *pluginList
	// s is the scenario as parsed so far (paths, core, traffic, events).
	s *Scenario
}

// parseEvents reads the events under key. An event at or after the time
// the traffic ends would never run and is refused.
func parseEvents(m *yamlcfg.Map, key string, ec *eventContext) []Event {
	var out []Event
	for _, it := range m.List(key) {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "an event is a mapping such as {at: 5s, path: bad, action: remove}")
			continue
		}
		e := it.Map
		ev := Event{Line: e.Line()}
		ev.At = e.DurationIn("at", 0, 0, MaxRunTime)
		switch {
		case !e.Has("at"):
			e.Errorf("at", "every event needs a time (at: 5s)")
		case e.Failed("at"):
		case ec.end > 0 && ev.At >= ec.end:
			e.Errorf("at", "%v is not before the traffic ends (at %v): the event would never run", ev.At, ec.end)
		}
		hasPath, hasLink := e.Has("path"), e.Has("link")
		ev.Path = e.String("path", "")
		switch {
		case e.Failed("path"):
		case hasPath && hasLink:
			e.Errorf("link", "give either path (a path) or link (core links), not both")
		case !hasPath && !hasLink:
			e.Errorf("path", "every event needs the path it changes (path: NAME) or the core links it changes (link: NAME or a list)")
		case !hasPath:
		case ec.tenants != nil:
			e.Errorf("path", "a tenants world has no paths; name its links instead (link: %s)", strings.Join(ec.core.LinkNames(), ", "))
		case !ec.paths[ev.Path]:
			e.Errorf("path", "%q is not a path of this scenario", ev.Path)
		case ec.plain[ev.Path]:
			e.Errorf("path", "path %q is via core without link parameters, so its access link is a plain veth with nothing to change; give the path link parameters (e.g. rate) to make it an emulated link, or name core links (link: NAME)", ev.Path)
		}
		if hasLink && !hasPath {
			ev.Links = e.Strings("link")
			seen := map[string]bool{}
			switch {
			case e.Failed("link"):
			case len(ev.Links) == 0:
				e.Errorf("link", "name at least one core link (link: NAME or link: [NAME, …])")
			case ec.core == nil:
				if !ec.coreFailed {
					e.Errorf("link", "the scenario has no core, so there are no core links to change")
				}
			case ec.coreFailed:
			default:
				for _, l := range ev.Links {
					if ec.core.Link(l) == nil {
						e.Errorf("link", "%q is not a core link (core links: %s)", l, strings.Join(ec.core.LinkNames(), ", "))
						break
					}
					if seen[l] {
						e.Errorf("link", "core link %q is named twice", l)
						break
					}
					seen[l] = true
				}
			}
		}
		ev.Action = Action(e.Enum("action", "", string(ActSet), string(ActDown), string(ActUp), string(ActRemove), string(ActIfDown), string(ActIfUp)))
		ev.Dir = Dir(e.Enum("dir", string(DirBoth), string(DirBoth), string(DirUp), string(DirDown)))
		hasSet := e.Has("set")
		set := e.Map("set")
		if set != nil {
			ev.Patch = ParsePatch(set, ec.dir)
		}
		if hasSet && ev.Action == "" && !e.Failed("action") {
			ev.Action = ActSet
		}
		switch {
		case e.Failed("action"), e.Failed("set"):
			// Reported already.
		case ev.Action == "":
			e.Errorf("action", "every event needs an action (valid: set, down, up, remove, ifdown, ifup)")
		case ev.Action == ActSet && (set == nil || len(set.Keys()) == 0):
			e.Errorf("set", "a set event needs the keys to change, e.g. set: {rate: 10mbit}")
		case ev.Action == ActRemove && hasLink && !hasPath:
			e.Errorf("action", "remove takes a path away (its link and endpoint); core links have no endpoint: take them down (valid for links: set, down, up)")
		case (ev.Action == ActIfDown || ev.Action == ActIfUp) && hasLink && !hasPath:
			e.Errorf("action", "%s acts on the client's interface of a path; core links have none: take them down or up (valid for links: set, down, up)", ev.Action)
		}
		set.Done()
		e.Done()
		out = append(out, ev)
	}
	return out
}
