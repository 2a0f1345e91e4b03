// Package metrics serves the daemon's Prometheus metrics (`mpsteer daemon
// --metrics ADDR`, at /metrics). What the kernel reports per subflow and
// per chain is read from the daemon's last round when Prometheus scrapes,
// so a series exists exactly as long as its subflow or chain: nothing is
// kept for subflows that are gone. Counters of the daemon's own doings
// (actions, events, reloads) have labels from small fixed sets.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/monitor"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
	"mpsteer/internal/stats"
)

// View is what a scrape reads of the daemon, copied under the daemon's
// lock (the chains are read after, without it).
type View struct {
	Version  string
	Interval time.Duration
	// Subflows are the last round's, every state.
	Subflows []observe.Subflow
	Conns    int
	// Outcomes not yet handed to the policies.
	Outcomes int
	Policies []string
	// Decisions are the last plan's, per subflow.
	Backup, Limits []policy.Action
	Reactions      []time.Duration
}

// Source is the daemon, as the metrics see it.
type Source interface {
	MetricsView() View
	// Chains lists the datapath's chains (nil when none is loaded); it is
	// called without the daemon's lock held.
	Chains() []*datapath.ChainStatus
}

// Metrics are the daemon's Prometheus metrics.
type Metrics struct {
	src Source
	hub *monitor.Hub
	reg *prometheus.Registry
	// subflowSeries: at most this many established subflows get
	// per-subflow series (9 each) in a scrape; negative: all. Tens of
	// thousands of series make a scrape cost the daemon more CPU and
	// memory than a second of its work; the totals stay exact.
	subflowSeries int

	actions      *prometheus.CounterVec
	events       *prometheus.CounterVec
	reloads      *prometheus.CounterVec
	lastReload   prometheus.Gauge
	sampleErrors prometheus.Counter
	rounds       prometheus.Histogram
	lastSample   prometheus.Gauge
}

// Descriptions of the series built at scrape time.
var (
	sfLabels       = []string{"token", "local", "remote"}
	descSRTT       = prometheus.NewDesc("mpsteer_subflow_srtt_seconds", "Smoothed RTT of an established subflow, as the kernel reports it.", sfLabels, nil)
	descCwnd       = prometheus.NewDesc("mpsteer_subflow_cwnd_packets", "Congestion window of a subflow, in segments.", sfLabels, nil)
	descDelivery   = prometheus.NewDesc("mpsteer_subflow_delivery_rate_bytes_per_second", "Delivery rate of a subflow (the kernel's tcpi_delivery_rate).", sfLabels, nil)
	descBytesAcked = prometheus.NewDesc("mpsteer_subflow_bytes_acked_total", "Bytes sent on a subflow and acknowledged by the peer (tcpi_bytes_acked).", sfLabels, nil)
	descBytesRecv  = prometheus.NewDesc("mpsteer_subflow_bytes_received_total", "Bytes received on a subflow (tcpi_bytes_received).", sfLabels, nil)
	descBytesSent  = prometheus.NewDesc("mpsteer_subflow_bytes_sent_total", "Bytes sent on a subflow, retransmissions included (tcpi_bytes_sent).", sfLabels, nil)
	descRetrans    = prometheus.NewDesc("mpsteer_subflow_retransmits_total", "Segments a subflow retransmitted (tcpi_total_retrans).", sfLabels, nil)
	descBackup     = prometheus.NewDesc("mpsteer_subflow_backup", "1 when a subflow is backup: side=local, this host asked the peer not to use it; side=remote, the peer asked this host not to.", append(append([]string(nil), sfLabels...), "side"), nil)

	descConns    = prometheus.NewDesc("mpsteer_connections", "MPTCP connections in the daemon's last sample.", nil, nil)
	descSubflows = prometheus.NewDesc("mpsteer_subflows", "Subflows in the daemon's last sample, by state.", []string{"state"}, nil)
	descJoining  = prometheus.NewDesc("mpsteer_pending_subflows", "Subflows asked for and still joining (SYN sent or received, not yet established).", nil, nil)
	descOmitted  = prometheus.NewDesc("mpsteer_subflow_series_omitted", "Established subflows without per-subflow series in this scrape (beyond --metrics-subflows).", nil, nil)
	descOutcomes = prometheus.NewDesc("mpsteer_pending_outcomes", "Outcomes of actions taken that the policies have not seen yet (they get them in their next round).", nil, nil)
	descMonitors = prometheus.NewDesc("mpsteer_monitor_clients", "Clients of the monitor stream.", nil, nil)
	descReaction = prometheus.NewDesc("mpsteer_reaction_latency_seconds", "From a path-manager event received to the actions it caused applied (the last 10000).", nil, nil)
	descInterval = prometheus.NewDesc("mpsteer_sample_interval_seconds", "The configured sampling interval.", nil, nil)
	descBuild    = prometheus.NewDesc("mpsteer_build_info", "The daemon's version (value 1).", []string{"version"}, nil)

	descDecisions = prometheus.NewDesc("mpsteer_policy_decisions", "Subflows each policy decides on in its last round, by verdict (active, backup, capped).", []string{"policy", "decision"}, nil)
	descPolicy    = prometheus.NewDesc("mpsteer_policy_info", "The policies running, in order (value 1).", []string{"policy", "position"}, nil)

	chainLabels  = []string{"chain", "dev", "hook"}
	descSeen     = prometheus.NewDesc("mpsteer_chain_packets_seen_total", "Packets a datapath chain saw.", chainLabels, nil)
	descSelected = prometheus.NewDesc("mpsteer_chain_packets_selected_total", "Packets a chain's selector picked.", chainLabels, nil)
	descSelBytes = prometheus.NewDesc("mpsteer_chain_selected_bytes_total", "Bytes of the packets a chain's selector picked.", chainLabels, nil)
	descModified = prometheus.NewDesc("mpsteer_chain_packets_modified_total", "Packets a chain's actors changed.", chainLabels, nil)
	descDropped  = prometheus.NewDesc("mpsteer_chain_packets_dropped_total", "Packets a chain dropped.", chainLabels, nil)
	descSkipped  = prometheus.NewDesc("mpsteer_chain_packets_skipped_total", "Packets a chain skipped (not parsed: too short, not TCP).", chainLabels, nil)
	descChErrors = prometheus.NewDesc("mpsteer_chain_errors_total", "Errors inside a chain's programs.", chainLabels, nil)
)

// New makes the metrics of src; subflowSeries bounds the per-subflow
// series (negative: every subflow).
func New(src Source, hub *monitor.Hub, subflowSeries int) *Metrics {
	m := &Metrics{src: src, hub: hub, reg: prometheus.NewRegistry(), subflowSeries: subflowSeries}
	m.actions = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mpsteer_policy_actions_total",
		Help: "Actions taken, by policy (daemon: the daemon's own housekeeping), kind (backup, limit, create, destroy, announce, withdraw, endpoint) and result (applied, refused, unsupported)."},
		[]string{"policy", "kind", "result"})
	m.events = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mpsteer_pm_events_total",
		Help: "Path-manager events received from the kernel, by event."}, []string{"event"})
	m.reloads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mpsteer_config_reloads_total",
		Help: "Config reloads, by trigger (SIGHUP, policy apply, config file changed) and result (applied, refused)."}, []string{"trigger", "result"})
	m.lastReload = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mpsteer_config_last_reload_success_timestamp_seconds",
		Help: "When a config was last applied (the start counts), Unix time."})
	m.sampleErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "mpsteer_sample_errors_total",
		Help: "Samples of the kernel's MPTCP state that failed."})
	m.rounds = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "mpsteer_round_duration_seconds",
		Help:    "Time of one round: sample the kernel, decide, act.",
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}})
	m.lastSample = prometheus.NewGauge(prometheus.GaugeOpts{Name: "mpsteer_last_sample_timestamp_seconds",
		Help: "When the kernel was last sampled successfully, Unix time."})
	m.lastReload.SetToCurrentTime()
	m.reg.MustRegister(m.actions, m.events, m.reloads, m.lastReload, m.sampleErrors, m.rounds, m.lastSample, m,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Action counts an action record.
func (m *Metrics) Action(a api.ActionRecord) {
	if m == nil {
		return
	}
	p := a.Policy
	if p == "" {
		p = "daemon"
	}
	m.actions.WithLabelValues(p, a.Kind, a.Result).Inc()
}

// Event counts a path-manager event.
func (m *Metrics) Event(ev pm.Event) {
	if m == nil {
		return
	}
	m.events.WithLabelValues(ev.Type.String()).Inc()
}

// Reload counts a reload and its outcome.
func (m *Metrics) Reload(trigger string, ok bool) {
	if m == nil {
		return
	}
	res := "applied"
	if !ok {
		res = "refused"
	}
	m.reloads.WithLabelValues(trigger, res).Inc()
	if ok {
		m.lastReload.SetToCurrentTime()
	}
}

// Round observes one reconcile round (failed: its sample failed).
func (m *Metrics) Round(start, end time.Time, failed bool) {
	if m == nil {
		return
	}
	m.rounds.Observe(end.Sub(start).Seconds())
	if !failed {
		m.lastSample.Set(float64(start.UnixNano()) / 1e9)
	}
}

// Describe sends the descriptions of the series built at scrape time.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSRTT, descCwnd, descDelivery, descBytesAcked, descBytesRecv, descBytesSent, descRetrans, descBackup,
		descConns, descSubflows, descJoining, descOmitted, descOutcomes, descMonitors, descReaction, descInterval, descBuild, descDecisions, descPolicy,
		descSeen, descSelected, descSelBytes, descModified, descDropped, descSkipped, descChErrors} {
		ch <- d
	}
}

// SampleError counts a failed sample.
func (m *Metrics) SampleError() {
	if m == nil {
		return
	}
	m.sampleErrors.Inc()
}

// Collect reads the daemon's last round and the chains.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	counter := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...)
	}
	b01 := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	v := m.src.MetricsView()
	gauge(descBuild, 1, v.Version)
	gauge(descMonitors, float64(m.hub.Count()))
	if v.Interval > 0 {
		gauge(descInterval, v.Interval.Seconds())
	}
	states := map[string]int{}
	joining, omitted := 0, 0
	seen := map[policy.SubflowID]bool{}
	for _, sf := range v.Subflows {
		states[StateName(sf.State)]++
		if sf.State == observe.TCPSynSent || sf.State == observe.TCPSynRecv {
			joining++
		}
		if sf.State != observe.TCPEstablished {
			continue
		}
		// The event tracker can add a subflow the sampler also reports:
		// one series each.
		if id := policy.ID(sf); seen[id] {
			continue
		} else if m.subflowSeries >= 0 && len(seen) >= m.subflowSeries {
			omitted++
			continue
		} else {
			seen[id] = true
		}
		l := []string{fmt.Sprintf("%08x", sf.Token), sf.Local.String(), sf.Remote.String()}
		gauge(descSRTT, sf.SRTT.Seconds(), l...)
		gauge(descCwnd, float64(sf.Cwnd), l...)
		gauge(descDelivery, float64(sf.DeliveryRate), l...)
		counter(descBytesAcked, float64(sf.BytesAcked), l...)
		counter(descBytesRecv, float64(sf.BytesRecv), l...)
		counter(descBytesSent, float64(sf.BytesSent), l...)
		counter(descRetrans, float64(sf.TotalRetrans), l...)
		gauge(descBackup, b01(sf.BackupLocal), append(l, "local")...)
		gauge(descBackup, b01(sf.BackupRemote), append(l, "remote")...)
	}
	gauge(descConns, float64(v.Conns))
	for _, s := range []string{"established", "syn-sent", "syn-recv"} {
		states[s] += 0 // always present, 0 when none
	}
	for s, n := range states {
		gauge(descSubflows, float64(n), s)
	}
	gauge(descJoining, float64(joining))
	gauge(descOmitted, float64(omitted))
	gauge(descOutcomes, float64(v.Outcomes))

	counts := map[[2]string]int{}
	for i, p := range v.Policies {
		gauge(descPolicy, 1, p, fmt.Sprint(i))
		for _, d := range []string{"active", "backup", "capped"} {
			counts[[2]string{p, d}] += 0
		}
	}
	for _, a := range v.Backup {
		d := "active"
		if a.Backup {
			d = "backup"
		}
		counts[[2]string{a.Policy, d}]++
	}
	for _, a := range v.Limits {
		if a.Rate > 0 {
			counts[[2]string{a.Policy, "capped"}]++
		}
	}
	for k, n := range counts {
		gauge(descDecisions, float64(n), k[0], k[1])
	}

	if len(v.Reactions) > 0 {
		sum := 0.0
		for _, x := range v.Reactions {
			sum += x.Seconds()
		}
		q := stats.Durations(v.Reactions, 0.5, 0.9, 0.99)
		ch <- prometheus.MustNewConstSummary(descReaction, uint64(len(v.Reactions)), sum,
			map[float64]float64{0.5: q[0].Seconds(), 0.9: q[1].Seconds(), 0.99: q[2].Seconds()})
	}

	for _, c := range m.src.Chains() {
		l := []string{fmt.Sprint(c.ID), c.Dev, string(c.Hook)}
		counter(descSeen, float64(c.Seen), l...)
		counter(descSelected, float64(c.Selected), l...)
		counter(descSelBytes, float64(c.Bytes), l...)
		counter(descModified, float64(c.Modified), l...)
		counter(descDropped, float64(c.Dropped), l...)
		counter(descSkipped, float64(c.Skipped), l...)
		counter(descChErrors, float64(c.Errors), l...)
	}
}

// tcpStates names the TCP states a subflow shows.
var tcpStates = map[uint8]string{1: "established", 2: "syn-sent", 3: "syn-recv", 4: "fin-wait1", 5: "fin-wait2",
	6: "time-wait", 7: "close", 8: "close-wait", 9: "last-ack", 11: "closing"}

// StateName names a TCP state.
func StateName(s uint8) string {
	if n, ok := tcpStates[s]; ok {
		return n
	}
	return fmt.Sprintf("state-%d", s)
}

// Handler serves /metrics in the Prometheus text format (or OpenMetrics
// when asked).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "mpsteer daemon: metrics at /metrics")
	})
	return mux
}

// serve listens on addr (in the daemon's network namespace) and serves
// the metrics until the returned stop is called.
// Serve listens on addr and serves the metrics until stop is called.
func (m *Metrics) Serve(addr string, logger *log.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Printf("metrics: %v", err)
		}
	}()
	logger.Printf("metrics on http://%s/metrics", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}

// Gatherer is the registry the metrics are served from.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }
