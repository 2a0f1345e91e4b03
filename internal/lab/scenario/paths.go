package scenario

import (
	"regexp"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// Host holds per-host settings.
type Host struct {
	Name string
	// CC is the congestion control; "" keeps the kernel's default.
	CC string
	// Rmem and Wmem are the largest TCP/MPTCP socket buffers the kernel's
	// autotuning may use (tcp_rmem/tcp_wmem max); 0 keeps the default.
	Rmem, Wmem units.Size
}

// Path is one emulated path between client and server.
type Path struct {
	Name string
	Up   linkemu.Params // client → server
	Down linkemu.Params // server → client
	// Backup makes the client's endpoint for this path a backup endpoint.
	Backup bool
	// ViaCore sends the path through the shared core (client → r1 is the
	// path's own access link).
	ViaCore bool
	// NoAnnounce: the server does not announce this via-core path's
	// address (announce: false), so the client's subflow from it is the
	// path's only one (a connection over n such paths has n subflows).
	NoAnnounce bool
	// Plain is set for a via-core path given no link parameters at all:
	// its access link is a plain veth (not emulated, never the
	// bottleneck), so it has nothing to set, take down or bring up.
	Plain bool
	Line  int
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,14}$`)

// ccRE is a congestion control's name (a host's or a VM's cc).
var ccRE = regexp.MustCompile(`^[a-z0-9_]+$`)

func parseHost(hosts *yamlcfg.Map, name string) Host {
	h := Host{Name: name}
	if hosts == nil {
		return h
	}
	hm := hosts.Map(name)
	if hm == nil {
		return h
	}
	h.CC = hm.String("cc", "")
	if h.CC != "" && !ccRE.MatchString(h.CC) {
		hm.Errorf("cc", "%q is not a congestion control name (e.g. bbr, cubic, reno)", h.CC)
	}
	h.Rmem = hm.SizeIn("rmem", 0, 0, MaxSocketBuffer)
	h.Wmem = hm.SizeIn("wmem", 0, 0, MaxSocketBuffer)
	hm.Done()
	return h
}

func parsePath(pm *yamlcfg.Map, dir string) *Path {
	p := &Path{Line: pm.Line()}
	p.Name = pm.String("name", "")
	switch {
	case pm.Failed("name"):
	case p.Name == "":
		pm.Errorf("name", "every path needs a name")
	case !nameRE.MatchString(p.Name):
		pm.Errorf("name", "%q is not a valid path name (lower-case letters, digits and '-', starting with a letter, at most 15 characters: it names network devices)", p.Name)
	}
	p.Backup = pm.Bool("backup", false)
	via := pm.Enum("via", "", "core")
	p.ViaCore = via == "core"
	if pm.Has("announce") {
		p.NoAnnounce = !pm.Bool("announce", true)
		if !p.ViaCore && !pm.Failed("via") {
			pm.Errorf("announce", "announce says whether the server announces a via-core path's own address; this path is direct (its server address is never announced): give via: core or leave announce out")
		}
	}
	if p.ViaCore {
		p.Plain = true
		for _, k := range append(PatchKeys, "up", "down") {
			if pm.Has(k) {
				p.Plain = false
			}
		}
	}
	p.Up, p.Down = parseUpDown(pm, dir)
	pm.Done()
	return p
}

// parseUpDown reads a link's emulation: the keys that apply both ways,
// then `up:` and `down:` maps that override them per direction.
func parseUpDown(m *yamlcfg.Map, dir string) (up, down linkemu.Params) {
	up = ParsePatch(m, dir).Apply(linkemu.Params{})
	down = up
	if um := m.Map("up"); um != nil {
		up = ParsePatch(um, dir).Apply(up)
		um.Done()
	}
	if dm := m.Map("down"); dm != nil {
		down = ParsePatch(dm, dir).Apply(down)
		dm.Done()
	}
	return up, down
}
