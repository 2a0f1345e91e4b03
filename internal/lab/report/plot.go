package report

import (
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Line is one named series for a plot.
type Line struct {
	Name string
	X, Y []float64
	Dash bool
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
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
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
	if ymax > 0 {
		p.Y.Max = ymax * 1.25 // room for the legend
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
	return p.Save(9*vg.Inch, 4.5*vg.Inch, file)
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

// PlotCDF draws the empirical distribution of each named sample set (e.g.
// flow completion times) into a PNG file, the x axis in xlabel's unit.
func PlotCDF(file, title, xlabel string, sets []Line) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "fraction of flows ≤ x"
	p.Y.Min, p.Y.Max = 0, 1.05
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = false
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
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}

// PlotXY draws named series of points joined by lines (a parameter sweep:
// goodput against subflows per pair, …) into a PNG file.
func PlotXY(file, title, xlabel, ylabel string, lines []Line) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	ymax := 0.0
	for i, l := range lines {
		var pts plotter.XYs
		for j := range l.X {
			pts = append(pts, plotter.XY{X: l.X[j], Y: l.Y[j]})
			ymax = math.Max(ymax, l.Y[j])
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
		p.Legend.Add(l.Name, ln, sc)
	}
	if ymax > 0 {
		p.Y.Max = ymax * 1.35 // room for the legend
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, file)
}
