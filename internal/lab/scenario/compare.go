package scenario

import (
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/yamlcfg"
)

// What a scenario's results compare (lab run --runs N): every variant
// against the baselines present among mptcp, tcp-best and tcp, and any
// the scenario names under compare (the paper's own baseline); on
// goodput_mbit and, when the scenario declares one, on its primary
// metric:
//
//	primary: fct_median_ms                        # which way is better follows from the name
//	primary: {metric: my_metric, better: lower}   # or is said
//	compare: [mptcp-ecmp]

// Primary is the figure a scenario's claim is about.
type Primary struct {
	Metric string
	// Higher: a higher value is better.
	Higher bool
}

// DefaultPrimary is goodput.
var DefaultPrimary = Primary{Metric: "goodput_mbit", Higher: true}

// Baselines are the variants every other variant is compared with, when
// the scenario has them (compare: adds more).
var Baselines = []string{"mptcp", TCPBest, "tcp"}

var metricRE = regexp.MustCompile(`^(share:[a-z][a-z0-9-]*|[a-z0-9_]+)$`)

// MetricHigherIsBetter says which way a figure improves, from its name:
// rates (…_mbit), shares and bytes are better higher; times (…_ms, …_s),
// retransmissions lower. ok is false for a name that says neither.
func MetricHigherIsBetter(metric string) (higher, ok bool) {
	switch {
	case strings.HasSuffix(metric, "_mbit"), strings.HasPrefix(metric, "share:"), strings.Contains(metric, "_share"), metric == "bytes":
		return true, true
	case strings.HasSuffix(metric, "_ms"), strings.HasSuffix(metric, "_s"), strings.Contains(metric, "_ms_"),
		metric == "retransmits", metric == "bytes_retrans":
		return false, true
	}
	return false, false
}

// parseComparisons reads primary and compare; it runs after the variants.
func parseComparisons(m *yamlcfg.Map, s *Scenario) {
	s.Primary = DefaultPrimary
	if m.Has("primary") {
		node := yamlcfg.RawNode(m, "primary")
		better := ""
		switch node.Kind {
		case yaml.MappingNode:
			pm := m.Map("primary")
			s.Primary.Metric = pm.String("metric", "")
			better = pm.Enum("better", "", "higher", "lower")
			if s.Primary.Metric == "" && !pm.Failed("metric") {
				pm.Errorf("metric", "name the metric (e.g. fct_median_ms)")
			}
			pm.Done()
		default:
			s.Primary.Metric = m.String("primary", "")
		}
		checkMetric(m, s, better)
	}
	for _, name := range m.Strings("compare") {
		if s.Variant(name) == nil {
			var names []string
			for _, v := range s.Variants {
				names = append(names, v.Name)
			}
			m.Errorf("compare", "%q is not a variant of this scenario (variants: %s)", name, strings.Join(names, ", "))
			continue
		}
		s.Compare = append(s.Compare, name)
	}
}

func checkMetric(m *yamlcfg.Map, s *Scenario, better string) {
	metric := s.Primary.Metric
	if m.Failed("primary") || metric == "" {
		return
	}
	if !metricRE.MatchString(metric) {
		m.Errorf("primary", "%q is not a metric (goodput_mbit, retransmits, duration_s, fct_median_ms, fct_p99_ms, share:PATH, or a key of a summary's metrics)", metric)
		return
	}
	if p, ok := strings.CutPrefix(metric, "share:"); ok && s.Tenants == nil && s.Path(p) == nil {
		m.Errorf("primary", "share:%s: %q is not a path of this scenario", p, p)
		return
	}
	switch better {
	case "higher", "lower":
		s.Primary.Higher = better == "higher"
	default:
		higher, ok := MetricHigherIsBetter(metric)
		if !ok {
			m.Errorf("primary", "which way %s is better does not follow from its name; say it: primary: {metric: %s, better: higher} (or lower)", metric, metric)
			return
		}
		s.Primary.Higher = higher
	}
}
