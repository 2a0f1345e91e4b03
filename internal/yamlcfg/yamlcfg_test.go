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
