package yamlcfg

import (
	"strings"
	"testing"
	"time"
)

func TestAccessorsAndErrors(t *testing.T) {
	src := `
name: demo
delay: 10ms
rate: 400
inner:
  loss: 1%
  colour: red
items:
  - a
  - {b: 2}
`
	m, err := Parse("x.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := m.String("name", ""); got != "demo" {
		t.Errorf("name = %q", got)
	}
	if got := m.Duration("delay", 0); got != 10*time.Millisecond {
		t.Errorf("delay = %v", got)
	}
	m.Rate("rate", 0)
	in := m.Map("inner")
	if got := in.Fraction("loss", 0); got != 0.01 {
		t.Errorf("loss = %v", got)
	}
	in.Done()
	items := m.List("items")
	if len(items) != 2 || items[0].Scalar != "a" || items[1].Map == nil {
		t.Fatalf("items = %+v", items)
	}
	items[1].Map.Int("b", 0, 0, 10)
	items[1].Map.Done()
	m.Done()
	err = m.Err()
	if err == nil {
		t.Fatal("want errors")
	}
	msg := err.Error()
	for _, want := range []string{
		`x.yaml:4: rate: rate "400" has no unit`,
		`x.yaml:7: inner.colour: unknown key "colour" (valid here: loss)`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestSyntaxErrorNamesFile(t *testing.T) {
	_, err := Parse("bad.yaml", []byte("a: [1, 2\n"))
	if err == nil || !strings.HasPrefix(err.Error(), "bad.yaml:") {
		t.Fatalf("err = %v", err)
	}
}

func TestEnumAndSingleItemList(t *testing.T) {
	m, err := Parse("y.yaml", []byte("mode: fast\nout: {at: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	m.Enum("mode", "", "slow", "medium")
	if l := m.List("out"); len(l) != 1 || l[0].Map == nil {
		t.Fatalf("single mapping not accepted as list: %+v", l)
	}
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), `"fast" is not valid (valid: slow, medium)`) {
		t.Fatalf("err = %v", err)
	}
}

func TestDuplicateKeysAreErrors(t *testing.T) {
	src := `name: a
policies:
  - k: 1
    name: prefer
    k: 2
inner:
  x: 1
  deeper: {y: 1, y: 2}
  x: 3
list: [{a: 1}, {b: 1, b: 2, b: 3}]
name: b
`
	m, err := Parse("c.yaml", []byte(src))
	if err == nil {
		t.Fatalf("duplicate keys accepted (map %v)", m)
	}
	if m != nil {
		t.Errorf("Parse returned a map along with the error")
	}
	want := []string{
		`c.yaml:5: policies[0].k: key "k" is given twice (first on line 3)`,
		`c.yaml:8: inner.deeper.y: key "y" is given twice (first on line 8)`,
		`c.yaml:9: inner.x: key "x" is given twice (first on line 7)`,
		`c.yaml:10: list[1].b: key "b" is given twice (first on line 10)`,
		`c.yaml:10: list[1].b: key "b" is given 3 times (first on line 10)`,
		`c.yaml:11: name: key "name" is given twice (first on line 1)`,
	}
	got := strings.Split(err.Error(), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("errors:\n%s\nwant:\n%s", err, strings.Join(want, "\n"))
	}
}

func TestDuplicateUnderAnAliasIsReportedOnce(t *testing.T) {
	src := "base: &b {k: 1, k: 2}\ncopy: *b\n"
	_, err := Parse("a.yaml", []byte(src))
	if err == nil {
		t.Fatal("duplicate key accepted")
	}
	if n := strings.Count(err.Error(), "is given twice"); n != 1 {
		t.Fatalf("reported %d times, want once: %v", n, err)
	}
}

func TestDistinctKeysInSiblingMappingsAreFine(t *testing.T) {
	src := "a: {k: 1}\nb: {k: 1}\nl: [{k: 1}, {k: 2}]\n"
	if _, err := Parse("ok.yaml", []byte(src)); err != nil {
		t.Fatal(err)
	}
}

func TestFailedMarksKeysWithProblems(t *testing.T) {
	m, err := Parse("f.yaml", []byte("rate: 10\ndelay: 5ms\nsizes: [{a: 1}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	m.Rate("rate", 0)
	m.Duration("delay", 0)
	m.Strings("sizes")
	if !m.Failed("rate") || m.Failed("delay") || !m.Failed("sizes") || m.Failed("absent") {
		t.Fatalf("Failed: rate %v delay %v sizes %v absent %v", m.Failed("rate"), m.Failed("delay"), m.Failed("sizes"), m.Failed("absent"))
	}
}
