package linkemu

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/units"
)

const ms = time.Millisecond

func TestRateSerialisesBackToBackPackets(t *testing.T) {
	p := NewPipe(Params{Rate: 8 * units.Mbit, Delay: 10 * ms}, 1)
	// 1500 B at 8 mbit take 1.5 ms each.
	for i := 1; i <= 3; i++ {
		at, v := p.Admit(0, 1500)
		want := time.Duration(i)*1500*time.Microsecond + 10*ms
		if v != Deliver || at != want {
			t.Fatalf("packet %d: %v at %v, want deliver at %v", i, v, at, want)
		}
	}
	// After the link drained, a packet is not delayed by earlier ones.
	at, _ := p.Admit(100*ms, 1500)
	if want := 100*ms + 1500*time.Microsecond + 10*ms; at != want {
		t.Fatalf("idle link: delivered at %v, want %v", at, want)
	}
}

func TestQueueLimitPackets(t *testing.T) {
	p := NewPipe(Params{Rate: units.Mbit, QueuePackets: 3}, 1)
	var verdicts []Verdict
	for i := 0; i < 5; i++ {
		_, v := p.Admit(0, 1000)
		verdicts = append(verdicts, v)
	}
	want := []Verdict{Deliver, Deliver, Deliver, DropQueue, DropQueue}
	for i := range want {
		if verdicts[i] != want[i] {
			t.Fatalf("verdicts %v, want %v", verdicts, want)
		}
	}
	// 1000 B at 1 mbit = 8 ms: after 8 ms one packet has left.
	if _, v := p.Admit(8*ms, 1000); v != Deliver {
		t.Fatalf("after one departure: %v, want deliver", v)
	}
	if b, n := p.Backlog(8 * ms); n != 3 || b != 3000 {
		t.Fatalf("backlog %d B %d pkts, want 3000 B 3 pkts", b, n)
	}
	if s := p.Stats(); s.DropQueue != 2 || s.Delivered != 4 || s.Packets != 6 {
		t.Fatalf("stats %+v", s)
	}
}

func TestQueueLimitBytes(t *testing.T) {
	p := NewPipe(Params{Rate: units.Mbit, QueueBytes: 2500}, 1)
	v1 := verdict(p.Admit(0, 1000))
	v2 := verdict(p.Admit(0, 1000))
	v3 := verdict(p.Admit(0, 1000))
	v4 := verdict(p.Admit(0, 500))
	if v1 != Deliver || v2 != Deliver || v3 != DropQueue || v4 != Deliver {
		t.Fatalf("got %v %v %v %v", v1, v2, v3, v4)
	}
}

func verdict(_ time.Duration, v Verdict) Verdict { return v }

func TestLossIsWithinBinomialBounds(t *testing.T) {
	const n, rate = 100000, 0.02
	p := NewPipe(Params{Loss: rate}, 42)
	lost := 0
	for i := 0; i < n; i++ {
		if _, v := p.Admit(time.Duration(i)*time.Microsecond, 100); v == DropLoss {
			lost++
		}
	}
	// 99% interval: mean ± 2.576 σ.
	mean, sd := n*rate, math.Sqrt(n*rate*(1-rate))
	if math.Abs(float64(lost)-mean) > 2.576*sd {
		t.Fatalf("lost %d of %d, want %.0f ± %.0f", lost, n, mean, 2.576*sd)
	}
	// Same seed, same losses.
	q := NewPipe(Params{Loss: rate}, 42)
	lost2 := 0
	for i := 0; i < n; i++ {
		if _, v := q.Admit(time.Duration(i)*time.Microsecond, 100); v == DropLoss {
			lost2++
		}
	}
	if lost != lost2 {
		t.Fatalf("same seed gave %d and %d losses", lost, lost2)
	}
}

func TestOutageSchedule(t *testing.T) {
	p := NewPipe(Params{Outages: []Outage{{At: time.Second, For: 500 * ms, Every: 2 * time.Second}}}, 1)
	p.SetOrigin(100 * ms)
	cases := map[time.Duration]bool{
		0:                          false,
		1099 * ms:                  false,
		1100 * ms:                  true,
		1599 * ms:                  true,
		1600 * ms:                  false,
		3100 * ms:                  true,
		3650 * ms:                  false,
		5100*ms + time.Microsecond: true,
	}
	for now, down := range cases {
		_, v := p.Admit(now, 100)
		if (v == DropOutage) != down {
			t.Errorf("at %v: %v, want down=%v", now, v, down)
		}
	}
	p.SetDown(true, 0)
	if _, v := p.Admit(0, 100); v != DropOutage {
		t.Errorf("manual down: %v", v)
	}
}

func TestJitterNeverReorders(t *testing.T) {
	p := NewPipe(Params{Delay: 20 * ms, Jitter: 10 * ms}, 7)
	var last time.Duration
	spread := map[bool]bool{}
	for i := 0; i < 10000; i++ {
		now := time.Duration(i) * 3 * ms
		at, _ := p.Admit(now, 100)
		if at < last {
			t.Fatalf("packet %d delivered at %v before the previous at %v", i, at, last)
		}
		if at < now+10*ms || at > now+30*ms+3*ms {
			t.Fatalf("packet %d: delay %v outside 20ms±10ms", i, at-now)
		}
		spread[at-now > 20*ms] = true
		last = at
	}
	if len(spread) != 2 {
		t.Fatalf("jitter never moved the delay to both sides of 20ms")
	}
}

func TestTraceSpendsOpportunities(t *testing.T) {
	tr := &Trace{Name: "t", Times: []time.Duration{1 * ms, 2 * ms, 4 * ms}, Period: 4 * ms}
	p := NewPipe(Params{Trace: tr}, 1)
	// Full-size packets use one opportunity each; the trace repeats.
	want := []time.Duration{1 * ms, 2 * ms, 4 * ms, 5 * ms, 6 * ms, 8 * ms}
	for i, w := range want {
		if at, _ := p.Admit(0, 1500); at != w {
			t.Fatalf("packet %d delivered at %v, want %v", i, at, w)
		}
	}
	// Small packets share an opportunity; a packet that does not fit
	// finishes in the next one.
	q := NewPipe(Params{Trace: tr}, 1)
	got := []time.Duration{}
	for i := 0; i < 3; i++ {
		at, _ := q.Admit(0, 1000)
		got = append(got, at)
	}
	if got[0] != 1*ms || got[1] != 2*ms || got[2] != 2*ms {
		t.Fatalf("1000 B packets delivered at %v, want [1ms 2ms 2ms]", got)
	}
	// An idle link loses its opportunities: a packet at 9.5 ms waits for the
	// one at 10 ms (third repetition: 9, 10, 12 ms).
	if at, _ := q.Admit(9500*time.Microsecond, 100); at != 10*ms {
		t.Fatalf("after idle: %v, want 10ms", at)
	}
}

func TestReadTrace(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.trace")
	os.WriteFile(good, []byte("1\n1\n5\n10\n"), 0o644)
	tr, err := ReadTrace(good)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Period != 10*ms || len(tr.Times) != 4 {
		t.Fatalf("trace %+v", tr)
	}
	// 4 opportunities of 1500 B per 10 ms = 4.8 mbit.
	if r := tr.MeanRate(); math.Abs(r-4.8e6) > 1 {
		t.Fatalf("mean rate %v", r)
	}
	bad := filepath.Join(dir, "bad.trace")
	os.WriteFile(bad, []byte("1\n5\nfoo\n"), 0o644)
	if _, err := ReadTrace(bad); err == nil || !strings.Contains(err.Error(), "bad.trace:3") {
		t.Fatalf("err = %v, want it to name bad.trace:3", err)
	}
	back := filepath.Join(dir, "back.trace")
	os.WriteFile(back, []byte("5\n1\n"), 0o644)
	if _, err := ReadTrace(back); err == nil {
		t.Fatal("decreasing timestamps accepted")
	}
}

func TestSetParamsChangesRateForNewPackets(t *testing.T) {
	p := NewPipe(Params{Rate: 8 * units.Mbit}, 1)
	a, _ := p.Admit(0, 1500) // 1.5 ms
	p.SetParams(Params{Rate: 80 * units.Mbit})
	b, _ := p.Admit(0, 1500) // +0.15 ms after the first
	if a != 1500*time.Microsecond || b != 1650*time.Microsecond {
		t.Fatalf("got %v, %v", a, b)
	}
}

func TestUpRecords(t *testing.T) {
	p := NewPipe(Params{Outages: []Outage{{At: time.Second, For: time.Second, Every: 5 * time.Second}}}, 1)
	p.Admit(500*ms, 100)  // before any outage: nothing to record
	p.Admit(1500*ms, 100) // dropped: down
	p.Admit(2300*ms, 100) // first packet after the 2 s link-up
	p.NoteData(2300 * ms)
	p.Admit(2400*ms, 100)
	p.NoteData(2400 * ms)
	p.Admit(7100*ms, 100) // after the second outage (6 s to 7 s)
	p.Admit(7200*ms, 100)
	p.NoteData(7200 * ms)
	ups := p.Ups()
	want := []UpRecord{{UpAt: 2 * time.Second, FirstPacketAt: 2300 * ms, FirstDataAt: 2300 * ms},
		{UpAt: 7 * time.Second, FirstPacketAt: 7100 * ms, FirstDataAt: 7200 * ms}}
	if len(ups) != len(want) || ups[0] != want[0] || ups[1] != want[1] {
		t.Fatalf("ups %+v, want %+v", ups, want)
	}
	// By hand.
	q := NewPipe(Params{}, 1)
	q.SetDown(true, time.Second)
	q.SetDown(false, 3*time.Second)
	q.Admit(3500*ms, 100)
	if u := q.Ups(); len(u) != 1 || u[0].UpAt != 3*time.Second || u[0].FirstPacketAt != 3500*ms {
		t.Fatalf("manual ups %+v", u)
	}
}

func TestHasTCPPayload(t *testing.T) {
	ack := make([]byte, 52) // IPv4 20 + TCP 32 (timestamps), no data
	ack[0], ack[3], ack[9], ack[20+12] = 0x45, 52, 6, 8<<4
	if HasTCPPayload(ack) {
		t.Fatal("a pure ACK counted as data")
	}
	data := append(append([]byte(nil), ack...), make([]byte, 100)...)
	data[2], data[3] = 0, 152
	if !HasTCPPayload(data) {
		t.Fatal("a data segment not seen")
	}
	udp := append([]byte(nil), data...)
	udp[9] = 17
	if HasTCPPayload(udp) {
		t.Fatal("UDP counted as TCP data")
	}
}

func TestReadTraceRefusesDevicesAndPipes(t *testing.T) {
	for _, p := range []string{"/dev/zero", "/dev/null", os.TempDir()} {
		if _, err := ReadTrace(p); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("%s: %v, want refused as not a regular file", p, err)
		}
	}
}

// With jitter each outage lasts its length and a part of the jitter,
// drawn from the seed and the outage's number: alike for two pipes with
// the same schedule (a link's two directions), spread over the jitter,
// and the link-up records follow the drawn ends.
func TestOutageJitter(t *testing.T) {
	o := Outage{At: time.Second, For: 500 * ms, Every: 2 * time.Second, Jitter: 300 * ms, Seed: 42}
	up, down := NewPipe(Params{Outages: []Outage{o}}, 1), NewPipe(Params{Outages: []Outage{o}}, 2)
	var lengths []time.Duration
	for k := int64(0); k < 20; k++ {
		l := o.length(k)
		if l < o.For || l >= o.For+o.Jitter {
			t.Fatalf("outage %d lasts %v, want within [%v, %v)", k, l, o.For, o.For+o.Jitter)
		}
		lengths = append(lengths, l)
		end := o.At + time.Duration(k)*o.Every + l
		for _, p := range []*Pipe{up, down} {
			if _, v := p.Admit(end-time.Microsecond, 100); v != DropOutage {
				t.Fatalf("outage %d: up %v before its end %v", k, v, end)
			}
			if _, v := p.Admit(end, 100); v == DropOutage {
				t.Fatalf("outage %d: still down at its end %v", k, end)
			}
		}
		if u := up.Ups(); len(u) != int(k)+1 || u[k].UpAt != end {
			t.Fatalf("outage %d: link-ups %+v, want the last at %v", k, u, end)
		}
	}
	lo, hi := lengths[0], lengths[0]
	for _, l := range lengths {
		lo, hi = min(lo, l), max(hi, l)
	}
	if hi-lo < o.Jitter/2 {
		t.Fatalf("20 outages spread over %v of the %v jitter: %v", hi-lo, o.Jitter, lengths)
	}
	if other := (Outage{For: o.For, Jitter: o.Jitter, Seed: 43}); other.length(0) == o.length(0) {
		t.Fatalf("another seed drew the same length %v", o.length(0))
	}
	if plain := (Outage{For: o.For}); plain.length(7) != o.For {
		t.Fatalf("no jitter: %v", plain.length(7))
	}
}
