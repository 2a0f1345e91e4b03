package runner

import (
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
)

// The files of one run (timeseries.csv, subflows.csv, flows.csv,
// summary.json, goodput.png, and share.png with more than one path) and reading them back for the report's plots.

func (r *variantRun) writeFiles(sum *report.Summary, samples []recorder.Sample) error {
	pmap := r.pathMapper()
	var names []string
	for _, p := range r.w.Paths {
		names = append(names, p.Name)
	}
	se := report.BuildSeries(samples, names, pmap, r.upload)
	var marks []report.Mark
	for _, e := range sum.Events {
		marks = append(marks, report.Mark{X: e.AtS, Label: e.Path + " " + e.Action})
	}
	title := fmt.Sprintf("%s — %s (%s)", r.s.Name, r.v.Name, r.w.CC["client"])
	var shares error
	if len(names) > 1 {
		shares = report.PlotShares(filepath.Join(r.dir, "share.png"), title, se, marks)
	}
	return errors.Join(
		shares,
		r.writeFlowsCSV(filepath.Join(r.dir, "flows.csv")),
		se.WriteCSV(filepath.Join(r.dir, "timeseries.csv")),
		recorder.WriteSubflowsCSV(filepath.Join(r.dir, "subflows.csv"), samples, pmap.Of),
		report.WriteJSON(filepath.Join(r.dir, "summary.json"), sum),
		report.PlotSeries(filepath.Join(r.dir, "goodput.png"), title, se, marks),
	)
}

// writeFlowsCSV writes one row per short flow (none: no file).
func (r *variantRun) writeFlowsCSV(file string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.flows) == 0 {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"start_s", "size_bytes", "fct_ms", "error"})
	for _, fl := range r.flows {
		w.Write([]string{strconv.FormatFloat(fl.Start.Seconds(), 'f', 6, 64), strconv.FormatInt(fl.Size, 10),
			strconv.FormatFloat(float64(fl.FCT)/1e6, 'f', 3, 64), fl.Err})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// readFCTs loads the completed flows' completion times (ms) of a flows.csv.
func readFCTs(file string) ([]float64, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []float64
	for _, row := range rows[1:] {
		if v, err := strconv.ParseFloat(row[2], 64); err == nil && row[3] == "" {
			out = append(out, v)
		}
	}
	return out, nil
}

// clip keeps a comparison plot to the scenario's time (a variant whose
// transfer never finished would stretch everyone's axis to its timeout);
// the whole series stay in each variant's timeseries.csv and goodput.png.
func clip(lines []report.Line, d time.Duration) []report.Line {
	if d <= 0 {
		return lines
	}
	end := (d + d/10).Seconds()
	out := make([]report.Line, len(lines))
	for i, l := range lines {
		out[i] = l
		n := 0
		for n < len(l.X) && l.X[n] <= end {
			n++
		}
		out[i].X, out[i].Y = l.X[:n], l.Y[:min(n, len(l.Y))]
	}
	return out
}

// readSeries loads time and application goodput from a timeseries.csv.
func readSeries(file string) ([2][]float64, error) {
	var out [2][]float64
	f, err := os.Open(file)
	if err != nil {
		return out, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return out, err
	}
	for _, row := range rows[1:] {
		t, err1 := strconv.ParseFloat(row[0], 64)
		g, err2 := strconv.ParseFloat(row[1], 64)
		if err1 == nil && err2 == nil {
			out[0] = append(out[0], t)
			out[1] = append(out[1], g)
		}
	}
	return out, nil
}

// readPathSeries loads time and each path's goodput from a
// timeseries.csv (its <path>_goodput_mbit columns).
func readPathSeries(file string) (*report.Series, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: empty", file)
	}
	se := &report.Series{PerPath: map[string][]float64{}}
	col := map[string]int{}
	for i, h := range rows[0] {
		if p, ok := strings.CutSuffix(h, "_goodput_mbit"); ok && p != "app" {
			se.Paths = append(se.Paths, p)
			col[p] = i
		}
	}
	for _, row := range rows[1:] {
		t, err := strconv.ParseFloat(row[0], 64)
		if err != nil {
			continue
		}
		se.T = append(se.T, t)
		for _, p := range se.Paths {
			v, err := strconv.ParseFloat(row[col[p]], 64)
			if err != nil {
				v = math.NaN()
			}
			se.PerPath[p] = append(se.PerPath[p], v)
		}
	}
	return se, nil
}
