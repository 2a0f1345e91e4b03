package report

import (
	"math"
	"os"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// Line is one named series for a plot.
type Line struct {
	Name string
	X, Y []float64
	Dash bool
	// Low and High, when given (PlotXY), are each point's interval, drawn
	// as an error bar.
	Low, High []float64
}

// Mark is a vertical marker (an event) on a time plot.
type Mark struct {
	X     float64
	Label string
}

// PlotLines draws lines over time into a PNG file.
func PlotLines(file, title, ylabel string, lines []Line, marks []Mark) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.X.Tick.Marker = TimeTicks{}
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	ymax := 0.0
	for i, l := range lines {
		var pts plotter.XYs
		for j := range l.X {
			if j < len(l.Y) && !math.IsNaN(l.Y[j]) && !math.IsInf(l.Y[j], 0) && !math.IsNaN(l.X[j]) {
				pts = append(pts, plotter.XY{X: l.X[j], Y: l.Y[j]})
				ymax = math.Max(ymax, l.Y[j])
			}
		}
		if len(pts) == 0 {
			continue
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		ln.Color = plotutil.Color(i)
		ln.Width = vg.Points(1.5)
		if l.Dash {
			ln.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(ln)
		p.Legend.Add(l.Name, ln)
	}
	if ymax > 0 && len(marks) > 0 {
		p.Y.Max = ymax * 1.1 // room for the marks' labels
	}
	for _, m := range marks {
		v, err := plotter.NewLine(plotter.XYs{{X: m.X, Y: 0}, {X: m.X, Y: math.Max(p.Y.Max, 1)}})
		if err != nil {
			return err
		}
		v.Color = plotutil.Color(7)
		v.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
		p.Add(v)
		if m.Label != "" {
			lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: m.X, Y: math.Max(p.Y.Max, 1) * 0.97}}, Labels: []string{m.Label}})
			if err == nil {
				p.Add(lbl)
			}
		}
	}
	return saveLegendOutside(p, 9*vg.Inch, 4.5*vg.Inch, file)
}

// SmoothSamples is the width of the moving average in plots: samples are
// 100 ms apart, and MPTCP's head-of-line blocking makes single samples
// jump between zero and bursts; 0.5 s shows the trend the papers plot.
const SmoothSamples = 5

// Smooth is a trailing moving average over n samples (NaN-aware).
func Smooth(y []float64, n int) []float64 {
	out := make([]float64, len(y))
	for i := range y {
		sum, k := 0.0, 0
		for j := max(0, i-n+1); j <= i; j++ {
			if !math.IsNaN(y[j]) {
				sum += y[j]
				k++
			}
		}
		out[i] = math.NaN()
		if k > 0 {
			out[i] = sum / float64(k)
		}
	}
	return out
}

// PlotSeries draws a variant's goodput: the application's and each path's.
func PlotSeries(file, title string, se *Series, marks []Mark) error {
	lines := []Line{{Name: "application goodput", X: se.T, Y: Smooth(se.App, SmoothSamples)}}
	for _, p := range se.Paths {
		lines = append(lines, Line{Name: "path " + p + " (acked)", X: se.T, Y: Smooth(se.PerPath[p], SmoothSamples), Dash: true})
	}
	return PlotLines(file, title+", 0.5 s average", "goodput (Mbit/s)", lines, marks)
}

// ShareSamples is the window of the share plots: each path's share of
// the bytes acknowledged over the last second (10 samples).
const ShareSamples = 10

// Shares is each path's share (0 to 1) of the bytes acknowledged on all
// paths over a trailing window of n samples; NaN where none were.
func (se *Series) Shares(n int) map[string][]float64 {
	out := map[string][]float64{}
	for _, p := range se.Paths {
		out[p] = make([]float64, len(se.T))
	}
	for i := range se.T {
		var total float64
		per := map[string]float64{}
		for _, p := range se.Paths {
			for j := max(0, i-n+1); j <= i; j++ {
				if v := se.PerPath[p][j]; !math.IsNaN(v) {
					per[p] += v
				}
			}
			total += per[p]
		}
		for _, p := range se.Paths {
			out[p][i] = math.NaN()
			if total > 0 {
				out[p][i] = per[p] / total
			}
		}
	}
	return out
}

// PlotShares draws each path's share of the bytes over time (a 1 s
// window), in percent.
func PlotShares(file, title string, se *Series, marks []Mark) error {
	sh := se.Shares(ShareSamples)
	var lines []Line
	for _, p := range se.Paths {
		y := make([]float64, len(sh[p]))
		for i, v := range sh[p] {
			y[i] = v * 100
		}
		lines = append(lines, Line{Name: "path " + p, X: se.T, Y: y})
	}
	return PlotLines(file, title+": each path's share of the bytes, 1 s window", "share of the bytes (%)", lines, marks)
}

// PlotCDF draws the empirical distribution of each named sample set (e.g.
// flow completion times) into a PNG file, the x axis in xlabel's unit.
func PlotCDF(file, title, xlabel string, sets []Line) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of flows ≤ x"
	p.Y.Min, p.Y.Max = 0, 1.05
	p.Add(plotter.NewGrid())
	for i, set := range sets {
		xs := append([]float64(nil), set.X...)
		sort.Float64s(xs)
		var pts plotter.XYs
		for j, x := range xs {
			pts = append(pts, plotter.XY{X: x, Y: float64(j+1) / float64(len(xs))})
		}
		if len(pts) == 0 {
			continue
		}
		ln, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		ln.Color = plotutil.Color(i)
		ln.Width = vg.Points(1.5)
		p.Add(ln)
		p.Legend.Add(set.Name, ln)
	}
	return saveLegendOutside(p, 7*vg.Inch, 4.5*vg.Inch, file)
}

// PlotXY draws named series of points joined by lines (a parameter sweep:
// goodput against subflows per pair, …) into a PNG file.
func PlotXY(file, title, xlabel, ylabel string, lines []Line) error {
	return PlotXYWith(file, title, xlabel, ylabel, lines, XYOptions{})
}

// XYOptions change PlotXYWith's axes.
type XYOptions struct {
	// LogX: a logarithmic x axis (for counts over decades: 1 to 10 000
	// flows); points at x ≤ 0 are left out.
	LogX bool
	// TicksAtData: the x axis is labelled at the points' x values (1, 2,
	// 4, 8, 16 VM pairs) instead of at round numbers.
	TicksAtData bool
}

// dataTicks labels an axis at given values.
type dataTicks []float64

func (d dataTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range d {
		if v >= min && v <= max {
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', -1, 64)})
		}
	}
	return out
}

// PlotXYWith is PlotXY with options. A line's Low and High, when given,
// are drawn as error bars.
func PlotXYWith(file, title, xlabel, ylabel string, lines []Line, o XYOptions) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	if o.LogX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if o.TicksAtData {
		seen := map[float64]bool{}
		var xs dataTicks
		for _, l := range lines {
			for _, x := range l.X {
				if !seen[x] && (!o.LogX || x > 0) {
					seen[x] = true
					xs = append(xs, x)
				}
			}
		}
		sort.Float64s(xs)
		p.X.Tick.Marker = xs
	}
	p.Add(plotter.NewGrid())
	for i, l := range lines {
		var pts plotter.XYs
		var bars xyErrors
		for j := range l.X {
			if o.LogX && l.X[j] <= 0 {
				continue
			}
			pts = append(pts, plotter.XY{X: l.X[j], Y: l.Y[j]})
			if j < len(l.Low) && j < len(l.High) && !math.IsNaN(l.Low[j]) && !math.IsNaN(l.High[j]) {
				bars.XYs = append(bars.XYs, plotter.XY{X: l.X[j], Y: l.Y[j]})
				bars.YErrors = append(bars.YErrors, struct{ Low, High float64 }{l.Y[j] - l.Low[j], l.High[j] - l.Y[j]})
			}
		}
		if len(pts) == 0 {
			continue
		}
		ln, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		ln.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		ln.Width = vg.Points(1.5)
		if l.Dash {
			ln.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(ln, sc)
		if len(bars.XYs) > 0 {
			eb, err := plotter.NewYErrorBars(bars)
			if err != nil {
				return err
			}
			eb.Color = plotutil.Color(i)
			p.Add(eb)
		}
		p.Legend.Add(l.Name, ln, sc)
	}
	return saveLegendOutside(p, 8*vg.Inch, 5*vg.Inch, file)
}

// xyErrors is points with their error bars, as plotter.NewYErrorBars
// reads them.
type xyErrors struct {
	plotter.XYs
	plotter.YErrors
}

// saveLegendOutside saves the plot with its legend in a column to the
// right of the data area, never over the data.
func saveLegendOutside(p *plot.Plot, w, h vg.Length, file string) error {
	leg := p.Legend
	p.Legend = plot.NewLegend() // p draws none of its own
	gap := vg.Points(10)
	c, err := draw.NewFormattedCanvas(w, h, "png")
	if err != nil {
		return err
	}
	lw := leg.Rectangle(draw.New(c)).Size().X + 2*gap
	if lw > w/3 {
		// A wide legend widens the image: the data area keeps its
		// two thirds and no label is cut at the right edge.
		w += lw - w/3
		if c, err = draw.NewFormattedCanvas(w, h, "png"); err != nil {
			return err
		}
	}
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -lw, 0, 0))
	// Top-aligned, level with the top of the data area (below the title).
	top := p.Title.TextStyle.Height(p.Title.Text) + p.Title.Padding + gap
	leg.Top, leg.Left = true, true
	leg.Draw(draw.Crop(dc, w-lw+gap, 0, 0, -top))
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TimeTicks marks a time axis (seconds) at round steps: every 1, 2 or
// 5 s, or 10, 20, 50 s and so on for longer runs, labelled in whole
// seconds, with unlabelled minor ticks between.
type TimeTicks struct{}

// Ticks returns the ticks between min and max.
func (TimeTicks) Ticks(min, max float64) []plot.Tick {
	span := max - min
	if !(span > 0) || math.IsInf(span, 0) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	step, minor := TimeStep(span)
	var out []plot.Tick
	for v := math.Ceil(min/minor) * minor; v <= max+minor*1e-9; v += minor {
		v = math.Round(v/minor) * minor // no drift
		t := plot.Tick{Value: v}
		if r := math.Mod(math.Abs(v), step); r < step*1e-9 || step-r < step*1e-9 {
			t.Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
		out = append(out, t)
	}
	return out
}

// TimeStep is the labelled step for a span of seconds (1, 2 or 5 times a
// power of ten, at least 1 s, at most 12 labels) and the minor step.
func TimeStep(span float64) (step, minor float64) {
	for mag := 1.0; ; mag *= 10 {
		for _, m := range []float64{1, 2, 5} {
			step = m * mag
			if span/step <= 12 {
				minor = step / 5
				if m == 2 {
					minor = step / 2
				}
				if minor < 1 {
					minor = step // no ticks between whole seconds
				}
				return step, minor
			}
		}
	}
}
