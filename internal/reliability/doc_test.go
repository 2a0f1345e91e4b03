package reliability

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestSoakDoc renders docs/reliability.md's table from the records in
// OutEnv's directory; make soak runs it after the cases.
func TestSoakDoc(t *testing.T) {
	dir, doc := os.Getenv(OutEnv), os.Getenv("MPSTEER_SOAK_DOC")
	if dir == "" || doc == "" {
		t.Skip("make soak renders the table (it sets " + OutEnv + " and MPSTEER_SOAK_DOC)")
	}
	rs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 {
		t.Fatalf("no records in %s", dir)
	}
	src, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := Splice(string(src), Render(rs))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(doc, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestTableAndMetric(t *testing.T) {
	rs := []Record{{Case: "b", Fault: "x | y", Tried: 3, Survived: 3, Lost: "nothing", Measured: map[string]any{"p99_ms": 1.5, "n": 2.0, "l": []any{1.0, 2.0}}},
		{Case: "a", Tried: 1, At: time.Unix(0, 0)}}
	tab := Table(rs)
	if !strings.Contains(tab, "| `b` | x \\| y | 3 | 3 | nothing | l 1/2, n 2, p99_ms 1.5 |") {
		t.Fatalf("table:\n%s", tab)
	}
	doc := "intro\n" + BeginMarker + "\nold\n" + EndMarker + "\nend\n"
	got, err := Splice(doc, "new\n")
	if err != nil || got != "intro\n"+BeginMarker+"\nnew\n"+EndMarker+"\nend\n" {
		t.Fatalf("splice: %q %v", got, err)
	}
	text := "# HELP x\ngo_goroutines 12\ngo_goroutines_extra 5\nm{a=\"1\",b=\"2\"} 3\nm{a=\"1\",b=\"3\"} 4\n" +
		"# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 4.5\nh_count 3\n"
	if v, ok := Metric(text, "go_goroutines"); !ok || v != 12 {
		t.Fatalf("go_goroutines = %v %v", v, ok)
	}
	if c, _ := Metric(text, "h_count"); c != 3 {
		t.Fatalf("h_count = %v", c)
	}
	if v, _ := Metric(text, "h_sum"); v != 4.5 {
		t.Fatalf("h_sum = %v", v)
	}
	if _, ok := Metric(text, "m", "a=9"); ok {
		t.Fatal("a label value no sample has matched")
	}
	if v, ok := Metric(text, "go_goroutines"); !ok || v != 12 {
		t.Fatalf("go_goroutines = %v %v", v, ok)
	}
	if v, _ := Metric(text, "m", "a=1"); v != 7 {
		t.Fatalf("m{a=1} summed = %v", v)
	}
	p, err := ReadProc(os.Getpid())
	if err != nil || p.FDs == 0 || p.RSSKiB == 0 {
		t.Fatalf("ReadProc: %+v %v", p, err)
	}
}
