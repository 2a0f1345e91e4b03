// Package recorder samples a running lab world every interval: the bytes
// the receiving applications read, and every TCP socket and MPTCP subflow
// of the client and the server as the kernel reports them (inet_diag).
package recorder

import (
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"time"

	"mpsteer/internal/observe"
)

// Sample is one snapshot.
type Sample struct {
	T        time.Duration // since the traffic started
	AppBytes int64         // cumulative bytes read by receiving applications
	Client   []observe.Subflow
	Server   []observe.Subflow
}

// Recorder owns the sock_diag sockets of both hosts.
type Recorder struct {
	client, server *observe.Sampler
	Samples        []Sample
}

// New opens samplers in the client and server namespaces.
func New(clientNS, serverNS string) (*Recorder, error) {
	r := &Recorder{}
	var err error
	if r.client, err = observe.NewSamplerIn(clientNS); err != nil {
		return nil, err
	}
	if r.server, err = observe.NewSamplerIn(serverNS); err != nil {
		r.client.Close()
		return nil, err
	}
	return r, nil
}

// Close releases the samplers.
func (r *Recorder) Close() {
	r.client.Close()
	r.server.Close()
}

// Take records one sample.
func (r *Recorder) Take(t time.Duration, appBytes int64) (Sample, error) {
	s := Sample{T: t, AppBytes: appBytes}
	var err error
	if s.Client, err = r.client.TCP(); err != nil {
		return s, fmt.Errorf("client: %w", err)
	}
	if s.Server, err = r.server.TCP(); err != nil {
		return s, fmt.Errorf("server: %w", err)
	}
	r.Samples = append(r.Samples, s)
	return s, nil
}

// SubflowHeader is the header of subflows.csv.
var SubflowHeader = []string{"time_s", "host", "path", "local", "remote", "mptcp", "token", "local_id", "remote_id",
	"backup_local", "backup_remote", "state", "cc", "srtt_ms", "min_rtt_ms", "rto_ms", "cwnd_pkts", "mss_bytes",
	"pacing_rate_mbit", "delivery_rate_mbit", "bytes_sent", "bytes_acked", "bytes_received", "bytes_retrans",
	"retransmits_total", "unacked_pkts", "last_ack_recv_ms", "backoff", "ca_state"}

// WriteSubflowsCSV writes every socket of every sample, one row each.
// pathOf names the path of a socket (by its client-side address).
func WriteSubflowsCSV(file string, samples []Sample, pathOf func(host string, sf observe.Subflow) string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	w := csv.NewWriter(f)
	w.Write(SubflowHeader)
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	mbit := func(bps uint64) string { return strconv.FormatFloat(float64(bps)*8/1e6, 'f', 3, 64) }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	for _, s := range samples {
		for _, host := range []string{"client", "server"} {
			socks := s.Client
			if host == "server" {
				socks = s.Server
			}
			for _, sf := range socks {
				w.Write([]string{
					strconv.FormatFloat(s.T.Seconds(), 'f', 3, 64), host, pathOf(host, sf),
					sf.Local.String(), sf.Remote.String(), strconv.FormatBool(sf.MPTCP),
					fmt.Sprintf("%08x", sf.Token), u(uint64(sf.LocalID)), u(uint64(sf.RemoteID)),
					strconv.FormatBool(sf.BackupLocal), strconv.FormatBool(sf.BackupRemote), u(uint64(sf.State)), sf.CC,
					ms(sf.SRTT), ms(sf.MinRTT), ms(sf.RTO), u(uint64(sf.Cwnd)), u(uint64(sf.MSS)),
					mbit(sf.PacingRate), mbit(sf.DeliveryRate), u(sf.BytesSent), u(sf.BytesAcked), u(sf.BytesRecv),
					u(sf.BytesRetrans), u(uint64(sf.TotalRetrans)), u(uint64(sf.Unacked)), ms(sf.LastAckRecv),
					u(uint64(sf.Backoff)), u(uint64(sf.CAState)),
				})
			}
		}
	}
	w.Flush()
	return w.Error()
}
