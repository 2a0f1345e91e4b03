package yamlcfg

import (
	"fmt"

	"gopkg.in/yaml.v3"
)

// StringLists returns a list of lists of values, such as
// "shared: [[wlan0, eth1], [eth2, eth3]]". A single list is taken as a
// list of one list.
func (m *Map) StringLists(key string) [][]string {
	m.known[key] = true
	_, v := m.lookup(key)
	if v == nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		m.Errorf(key, "must be a list of lists, e.g. [[wlan0, eth1]]")
		return nil
	}
	elems := v.Content
	if len(elems) > 0 && resolve(elems[0]).Kind == yaml.ScalarNode {
		elems = []*yaml.Node{v} // one list
	}
	var out [][]string
	for i, e := range elems {
		e = resolve(e)
		p := fmt.Sprintf("%s[%d]", m.keyPath(key), i)
		if e.Kind != yaml.SequenceNode {
			m.ErrorAt(e, p, "must be a list of values, e.g. [wlan0, eth1]")
			continue
		}
		var list []string
		for _, x := range e.Content {
			x = resolve(x)
			if x.Kind != yaml.ScalarNode {
				m.ErrorAt(x, p, "must be a single value, not a %s", kindName(x))
				continue
			}
			list = append(list, x.Value)
		}
		out = append(out, list)
	}
	return out
}
