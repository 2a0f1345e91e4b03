package scenario

import (
	"fmt"
	"strings"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/yamlcfg"
)

// Core is the parallel emulated links between routers r1 and r2.
//
// With links (LinksPerPair 0) every via-core path shares M links named
// core0…core{M-1}, with ECMP over them by L4 hash. With links_per_pair,
// every ordered (client address, server address) pair of the via-core paths
// has its own M links, named c<i>x<j>-<k>: i and j are the 1-based
// positions of the client's and the server's path among the via-core
// paths, k the 0-based link of the pair.
type Core struct {
	Links        []CoreLink
	LinksPerPair int
	Line         int
	// bad is set when the number of links could not be read: link names
	// are then unknown, and events naming links are not checked.
	bad bool
}

// CoreLink is one link of the core.
type CoreLink struct {
	Name     string
	Up, Down linkemu.Params
	// With links_per_pair: the paths whose client and server addresses
	// the link joins, and its index among the pair's links.
	Client, Server string
	K              int
}

// Link returns the core link with this name.
func (c *Core) Link(name string) *CoreLink {
	if c == nil {
		return nil
	}
	for i := range c.Links {
		if c.Links[i].Name == name {
			return &c.Links[i]
		}
	}
	return nil
}

// LinkNames lists the core's links in order.
func (c *Core) LinkNames() []string {
	if c == nil {
		return nil
	}
	out := make([]string, len(c.Links))
	for i, l := range c.Links {
		out[i] = l.Name
	}
	return out
}

// PairLinkName names link k of the pair (client path i, server path j),
// i and j 1-based among the via-core paths.
func PairLinkName(i, j, k int) string { return fmt.Sprintf("c%dx%d-%d", i, j, k) }

func parseCore(c *yamlcfg.Map, dir string, via []string) *Core {
	core := &Core{Line: c.Line()}
	hasLinks, hasPerPair := c.Has("links"), c.Has("links_per_pair")
	n := 0
	switch {
	case hasLinks && hasPerPair:
		c.Errorf("links_per_pair", "give either links (M links shared by every via-core path) or links_per_pair (M links for every client/server address pair), not both")
	case hasPerPair:
		core.LinksPerPair = c.Int("links_per_pair", 0, 1, MaxLinksPerPair)
		pairs := len(via) * len(via)
		switch {
		case c.Failed("links_per_pair"):
		case pairs == 0:
			c.Errorf("links_per_pair", "no path is via core, so a core of links per address pair would have no links (give some paths via: core)")
		case pairs*core.LinksPerPair > MaxCoreLinksTotal:
			c.Errorf("links_per_pair", "%d links for each of %d (client, server) address pairs (%d via-core paths) make %d core links; the core's addressing (a /24 of 10.200.0.0/16 per link) allows at most %d",
				core.LinksPerPair, pairs, len(via), pairs*core.LinksPerPair, MaxCoreLinksTotal)
			core.LinksPerPair = 0
		}
	case hasLinks:
		n = c.Int("links", 0, 1, MaxCoreLinks)
	default:
		c.Errorf("links", "a core needs links (the number of parallel links shared by every via-core path, 1 to %d) or links_per_pair (the number of links for every client/server address pair, 1 to %d)", MaxCoreLinks, MaxLinksPerPair)
	}
	def := ParsePatch(c, dir).Apply(linkemu.Params{})
	for i := 0; i < n; i++ {
		core.Links = append(core.Links, CoreLink{Name: fmt.Sprintf("core%d", i), Up: def, Down: def})
	}
	if m := core.LinksPerPair; m > 0 {
		for i, cp := range via {
			for j, sp := range via {
				for k := 0; k < m; k++ {
					core.Links = append(core.Links, CoreLink{Name: PairLinkName(i+1, j+1, k), Up: def, Down: def, Client: cp, Server: sp, K: k})
				}
			}
		}
	}
	// Per-link overrides: overrides: [{link: 2, rate: 10mbit}, …], or by
	// name with links_per_pair: [{link: c1x2-0, rate: 10mbit}].
	for _, it := range c.List("overrides") {
		if it.Map == nil {
			c.ErrorAt(it.Node, it.Path, "an override is a mapping such as {link: 1, rate: 10mbit}")
			continue
		}
		i := -1
		switch {
		case core.LinksPerPair > 0:
			name := it.Map.String("link", "")
			switch {
			case it.Map.Failed("link"):
			case name == "":
				it.Map.Errorf("link", "an override needs the link it changes (link: NAME, e.g. link: %s)", core.Links[0].Name)
			default:
				for k, l := range core.Links {
					if l.Name == name {
						i = k
					}
				}
				if i < 0 {
					it.Map.Errorf("link", "%q is not a core link (core links: %s)", name, strings.Join(core.LinkNames(), ", "))
				}
			}
		case n > 0:
			i = it.Map.Int("link", -1, 0, n-1)
			if i < 0 && !it.Map.Failed("link") {
				it.Map.Errorf("link", "an override needs the link it changes (link: 0 to %d)", n-1)
			}
		default:
			it.Map.Has("link") // the core's links are reported already
		}
		patch := ParsePatch(it.Map, dir)
		it.Map.Done()
		if i >= 0 && i < len(core.Links) {
			core.Links[i].Up = patch.Apply(core.Links[i].Up)
			core.Links[i].Down = patch.Apply(core.Links[i].Down)
		}
	}
	core.bad = c.Failed("links") || c.Failed("links_per_pair") || len(core.Links) == 0
	c.Done()
	return core
}
