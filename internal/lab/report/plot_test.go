package report

import (
	"math"
	"path/filepath"
	"testing"

	"gonum.org/v1/plot/plotutil"

	"mpsteer/internal/testutil"
)

func TestTimeTicksAreRound(t *testing.T) {
	for _, c := range []struct {
		span, step, minor float64
	}{{3, 1, 1}, {9.5, 1, 1}, {15, 2, 1}, {24, 2, 1}, {30, 5, 1}, {60, 5, 1}, {90, 10, 2}, {200, 20, 10}, {600, 50, 10}} {
		step, minor := TimeStep(c.span)
		if step != c.step || minor != c.minor {
			t.Errorf("span %vs: step %v minor %v, want %v and %v", c.span, step, minor, c.step, c.minor)
		}
	}
	var labels []string
	for _, tk := range (TimeTicks{}).Ticks(0, 15.3) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
		if tk.Value != math.Round(tk.Value) {
			t.Errorf("tick at %v is not a whole second", tk.Value)
		}
	}
	if got := len(labels); got != 8 || labels[0] != "0" || labels[1] != "2" || labels[7] != "14" {
		t.Errorf("labels over 0–15.3 s: %v, want every 2 s from 0 to 14", labels)
	}
}

// The legend sits to the right of the data area: the column it takes
// holds no data line, only the legend's text and swatches.
func TestLegendIsOutsideTheData(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.png")
	x := []float64{0, 5, 10, 15}
	lines := []Line{{Name: "application goodput", X: x, Y: []float64{10, 10, 10, 10}},
		{Name: "path wifi (acked)", X: x, Y: []float64{9.9, 9.9, 0, 9.9}, Dash: true},
		{Name: "path lte (acked)", X: x, Y: []float64{0, 0, 9.9, 0}, Dash: true}}
	if err := PlotLines(file, "demo", "goodput (Mbit/s)", lines, []Mark{{X: 7, Label: "wifi down"}}); err != nil {
		t.Fatal(err)
	}
	img := testutil.DecodePNG(t, file)
	b := img.Bounds()
	if b.Dx() < 800 {
		t.Fatalf("image %v", b)
	}
	// The data's top line (y = 10, the maximum) reaches the top of the
	// data area, which must end left of the legend column: the right
	// tenth of the image, just below the title, has the legend's text
	// (dark pixels) and nothing drawn in the series' first colour spans
	// it horizontally (a data line would).
	row := b.Min.Y + b.Dy()/6
	dark := 0
	for x := b.Max.X - b.Dx()/5; x < b.Max.X; x++ {
		r, g, bl, _ := img.At(x, row).RGBA()
		if r < 0x8000 && g < 0x8000 && bl < 0x8000 {
			dark++
		}
	}
	if dark > b.Dx()/10 {
		t.Errorf("a long dark run (%d px) at the legend's height on the right: a data line under the legend?", dark)
	}
}

// A legend wider than a third of the image widens the image instead of
// being cut at its right edge: the image with long names is wider than
// the one with short names, and its right-most column is blank.
func TestWideLegendWidensTheImage(t *testing.T) {
	width := func(names ...string) (int, bool) {
		file := filepath.Join(t.TempDir(), "cdf.png")
		var sets []Line
		for i, n := range names {
			sets = append(sets, Line{Name: n, X: []float64{60 + float64(i), 90, 120}})
		}
		if err := PlotCDF(file, "fct", "flow completion time (ms)", sets); err != nil {
			t.Fatal(err)
		}
		img := testutil.DecodePNG(t, file)
		b := img.Bounds()
		blank := true
		for y := b.Min.Y; y < b.Max.Y; y++ {
			if r, g, bl, _ := img.At(b.Max.X-1, y).RGBA(); r < 0xc000 || g < 0xc000 || bl < 0xc000 {
				blank = false
			}
		}
		return b.Dx(), blank
	}
	short, _ := width("tcp", "mptcp")
	long, blank := width("tcp (median 111.3 ms, p99 128.9 ms)", "mptcp+incremental (median 111.5 ms, p99 129.6 ms)")
	if long <= short {
		t.Errorf("long legend names: image %d px wide, short ones %d: the legend was cut", long, short)
	}
	if !blank {
		t.Error("the right-most column of the image has ink: the legend runs off the edge")
	}
}

// A sweep over decades on a log axis, with intervals: the error bars are
// drawn (more pixels in the line's colour than without them), and a point
// at x = 0, which a log axis cannot place, is left out instead of failing.
func TestPlotXYLogWithIntervals(t *testing.T) {
	dir := t.TempDir()
	x := []float64{0, 1, 10, 100, 1000, 10000}
	y := []float64{1, 1, 1.2, 1.1, 1.3, 1.2}
	coloured := func(l Line) int {
		file := filepath.Join(dir, "p.png")
		if err := PlotXYWith(file, "share", "flows", "share (%)", []Line{l}, XYOptions{LogX: true}); err != nil {
			t.Fatal(err)
		}
		img := testutil.DecodePNG(t, file)
		want := plotutil.Color(0)
		wr, wg, wb, _ := want.RGBA()
		n := 0
		b := img.Bounds()
		for py := b.Min.Y; py < b.Max.Y; py++ {
			for px := b.Min.X; px < b.Max.X; px++ {
				r, g, bl, _ := img.At(px, py).RGBA()
				if r == wr && g == wg && bl == wb {
					n++
				}
			}
		}
		return n
	}
	plain := coloured(Line{Name: "chain of 4", X: x, Y: y})
	lo, hi := make([]float64, len(y)), make([]float64, len(y))
	for i := range y {
		lo[i], hi[i] = y[i]-0.5, y[i]+0.5
	}
	bars := coloured(Line{Name: "chain of 4", X: x, Y: y, Low: lo, High: hi})
	if plain == 0 || bars <= plain {
		t.Errorf("pixels in the line's colour: %d without intervals, %d with; want more with", plain, bars)
	}
}

func TestSharesOverAWindow(t *testing.T) {
	se := &Series{Paths: []string{"a", "b"}, T: []float64{0.1, 0.2, 0.3, 0.4},
		PerPath: map[string][]float64{"a": {10, 10, 0, 0}, "b": {0, 10, 10, math.NaN()}}}
	sh := se.Shares(2)
	want := map[string][]float64{"a": {1, 2.0 / 3, 1.0 / 3, 0}, "b": {0, 1.0 / 3, 2.0 / 3, 1}}
	for p, w := range want {
		for i := range w {
			if math.Abs(sh[p][i]-w[i]) > 1e-9 {
				t.Errorf("%s[%d] = %v, want %v", p, i, sh[p][i], w[i])
			}
		}
	}
	if got := (&Series{Paths: []string{"a"}, T: []float64{0.1}, PerPath: map[string][]float64{"a": {0}}}).Shares(10)["a"][0]; !math.IsNaN(got) {
		t.Errorf("no bytes: share %v, want NaN", got)
	}
}
