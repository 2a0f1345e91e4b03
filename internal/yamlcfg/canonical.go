package yamlcfg

import "gopkg.in/yaml.v3"

// Canonical is the mapping's content without comments, layout or key
// order: two entries that mean the same have the same canonical text. A
// reload compares entries with it to keep what did not change.
func (m *Map) Canonical() string {
	var v any
	if err := m.node.Decode(&v); err != nil {
		return ""
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}
