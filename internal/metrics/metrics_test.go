package metrics

import (
	"encoding/json"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/monitor"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// fakeSource is a daemon's view as a test sets it.
type fakeSource struct{ v View }

func (f *fakeSource) MetricsView() View               { return f.v }
func (f *fakeSource) Chains() []*datapath.ChainStatus { return nil }

func newTestMetrics(series int) (*Metrics, *fakeSource) {
	src := &fakeSource{}
	return New(src, monitor.NewHub(), series), src
}

func sf(local, remote string, backup bool) observe.Subflow {
	return observe.Subflow{Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort(remote), Token: 0xabcd,
		State: observe.TCPEstablished, MPTCP: true, SRTT: 12 * time.Millisecond, Cwnd: 40, BytesAcked: 1000, TotalRetrans: 3, BackupLocal: backup}
}

// families gathers the registry: name → its metrics.
func families(t *testing.T, reg *prometheus.Registry) map[string][]*dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*dto.Metric{}
	for _, mf := range mfs {
		out[mf.GetName()] = mf.Metric
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Per-subflow series exist while their subflow does: when it goes, its
// series go; counters of actions count by policy, kind and result.
func TestMetricsFollowSubflowsAndCountActions(t *testing.T) {
	m, src := newTestMetrics(-1)
	a, b := sf("10.1.0.1:40000", "10.9.0.2:5201", false), sf("10.2.0.1:40001", "10.9.0.2:5201", true)
	src.v.Subflows = []observe.Subflow{a, b}
	src.v.Backup = []policy.Action{{Kind: policy.Backup, Policy: "prefer", Backup: true, Subflow: policy.ID(b)}, {Kind: policy.Backup, Policy: "prefer", Subflow: policy.ID(a)}}
	for _, r := range []api.ActionRecord{{Kind: "backup", Policy: "prefer", Result: "applied"}, {Kind: "create", Policy: "fullmesh", Result: "refused"}, {Kind: "endpoint", Result: "applied"}} {
		m.Action(r)
	}
	f := families(t, m.reg)
	srtt := f["mpsteer_subflow_srtt_seconds"]
	if len(srtt) != 2 || srtt[0].Gauge.GetValue() != 0.012 {
		t.Fatalf("srtt series %v", srtt)
	}
	var backups []string
	for _, m := range f["mpsteer_subflow_backup"] {
		if m.Gauge.GetValue() == 1 {
			backups = append(backups, label(m, "local")+" "+label(m, "side"))
		}
	}
	if len(backups) != 1 || backups[0] != "10.2.0.1:40001 local" {
		t.Fatalf("backup series set: %v", backups)
	}
	if r := f["mpsteer_subflow_retransmits_total"]; len(r) != 2 || r[0].Counter.GetValue() != 3 {
		t.Fatalf("retransmits %v", r)
	}
	got := map[string]float64{}
	for _, m := range f["mpsteer_policy_actions_total"] {
		got[label(m, "policy")+"/"+label(m, "kind")+"/"+label(m, "result")] = m.Counter.GetValue()
	}
	if got["prefer/backup/applied"] != 1 || got["fullmesh/create/refused"] != 1 || got["daemon/endpoint/applied"] != 1 {
		t.Fatalf("actions %v", got)
	}
	dec := map[string]float64{}
	for _, m := range f["mpsteer_policy_decisions"] {
		dec[label(m, "policy")+"/"+label(m, "decision")] = m.Gauge.GetValue()
	}
	if dec["prefer/backup"] != 1 || dec["prefer/active"] != 1 {
		t.Fatalf("decisions %v", dec)
	}
	// The subflow goes: so do its series.
	src.v.Subflows = []observe.Subflow{a}
	f = families(t, m.reg)
	for _, name := range []string{"mpsteer_subflow_srtt_seconds", "mpsteer_subflow_cwnd_packets", "mpsteer_subflow_bytes_acked_total"} {
		if n := len(f[name]); n != 1 {
			t.Errorf("%s: %d series after a subflow left, want 1", name, n)
		}
	}
	if n := len(f["mpsteer_subflow_backup"]); n != 2 {
		t.Errorf("backup: %d series, want 2 (local and remote of the one subflow)", n)
	}
}

// metricNames are every metric name the daemon can expose.
func metricNames(t *testing.T) map[string]bool {
	m, _ := newTestMetrics(-1)
	ch := make(chan *prometheus.Desc, 1000)
	m.Describe(ch)
	for _, c := range []prometheus.Collector{m.actions, m.events, m.reloads, m.lastReload, m.sampleErrors, m.rounds, m.lastSample} {
		c.Describe(ch)
	}
	close(ch)
	re := regexp.MustCompile(`fqName: "([a-z0-9_]+)"`)
	names := map[string]bool{}
	for desc := range ch {
		if s := re.FindStringSubmatch(desc.String()); s != nil {
			names[s[1]] = true
		}
	}
	return names
}

// The Grafana dashboard is well-formed JSON and every mpsteer_ metric it
// queries is one the daemon exposes.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/mpsteer-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" || len(dash.Panels) < 6 {
		t.Fatalf("dashboard: title %q uid %q, %d panels", dash.Title, dash.UID, len(dash.Panels))
	}
	known := metricNames(t)
	re := regexp.MustCompile(`mpsteer_[a-z0-9_]+`)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			for _, n := range re.FindAllString(tg.Expr, -1) {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && known[b] {
						base = b
					}
				}
				if !known[base] {
					t.Errorf("panel %q queries %s, which the daemon does not expose", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	for _, must := range []string{"mpsteer_subflow_srtt_seconds", "mpsteer_subflow_cwnd_packets", "mpsteer_subflow_bytes_acked_total",
		"mpsteer_subflow_backup", "mpsteer_subflow_retransmits_total", "mpsteer_policy_actions_total", "mpsteer_policy_decisions",
		"mpsteer_chain_packets_selected_total", "mpsteer_chain_packets_modified_total", "mpsteer_chain_packets_dropped_total",
		"mpsteer_last_sample_timestamp_seconds", "mpsteer_pending_outcomes"} {
		if !used[must] {
			t.Errorf("the dashboard shows nothing of %s", must)
		}
	}
}

// Per-subflow series stop at --metrics-subflows; the totals still count
// every subflow and the gauge says how many went without series.
func TestMetricsCapPerSubflowSeries(t *testing.T) {
	m, src := newTestMetrics(1)
	src.v.Subflows = []observe.Subflow{sf("10.1.0.1:40000", "10.9.0.2:5201", false), sf("10.2.0.1:40001", "10.9.0.2:5201", true)}
	f := families(t, m.reg)
	if n := len(f["mpsteer_subflow_srtt_seconds"]); n != 1 {
		t.Errorf("%d srtt series, want 1", n)
	}
	if o := f["mpsteer_subflow_series_omitted"]; len(o) != 1 || o[0].Gauge.GetValue() != 1 {
		t.Errorf("omitted %v, want 1", o)
	}
	for _, m := range f["mpsteer_subflows"] {
		if label(m, "state") == "established" && m.Gauge.GetValue() != 2 {
			t.Errorf("established %v, want 2 (every subflow)", m.Gauge.GetValue())
		}
	}
}
