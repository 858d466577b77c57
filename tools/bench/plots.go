package main

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// The bench's pictures (-plots DIR; the full run writes them into
// docs/bench), drawn with gonum's plot package as SVG.

// plotWidth and plotHeight are every picture's size.
var plotWidth, plotHeight = 7 * vg.Inch, 4 * vg.Inch

// savePlot writes p to dir/name, creating dir.
func savePlot(p *plot.Plot, dir, name string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := p.Save(plotWidth, plotHeight, filepath.Join(dir, name)); err != nil {
		return fmt.Errorf("plot %s: %w", name, err)
	}
	return nil
}

// plotScale draws scale.svg: the worker's backlog throughput and its
// pickup p99 against the finished jobs in river_job, each as a share of
// the empty table's (the median of the paired rounds' shares), with the
// targets (≥ 0.8, ≤ 1.5).
func plotScale(r scaleResult, dir string) error {
	if len(r.Points) == 0 {
		return fmt.Errorf("plot scale.svg: no points")
	}
	p := plot.New()
	p.Title.Text = "ferry's worker as river_job fills with finished jobs"
	p.X.Label.Text = "finished jobs in river_job (millions)"
	p.Y.Label.Text = "share of the empty table's figure"
	thr, p99 := make(plotter.XYs, len(r.Points)), make(plotter.XYs, len(r.Points))
	for i, pt := range r.Points {
		x := float64(pt.Finished) / 1e6
		thr[i] = plotter.XY{X: x, Y: pt.ThroughputRatio}
		p99[i] = plotter.XY{X: x, Y: pt.PickupP99Ratio}
	}
	if err := plotutil.AddLinePoints(p, "backlog throughput (target ≥ 0.8)", thr, "pickup p99 at 500 jobs/s (target ≤ 1.5)", p99); err != nil {
		return err
	}
	addTarget(p, r.Points[len(r.Points)-1].Finished, 0.8)
	addTarget(p, r.Points[len(r.Points)-1].Finished, 1.5)
	p.Y.Min = 0
	p.Y.Max = max(p.Y.Max, 1.6)
	p.Legend.Top = true
	return savePlot(p, dir, "scale.svg")
}

// addTarget draws a dashed grey line at y across [0, maxX] jobs.
func addTarget(p *plot.Plot, maxX int, y float64) {
	l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: y}, {X: float64(maxX) / 1e6, Y: y}})
	if err != nil {
		return
	}
	l.Color = color.Gray{Y: 150}
	l.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(l)
}

// pickupPoint is the pickup latency at one insert rate.
type pickupPoint struct {
	Rate          int     `json:"rate"`
	P50, P90, P99 float64 `json:"-"`
}

// plotPickup draws pickup.svg: insert-to-start p50, p90 and p99 against
// the insert rate, at ferry's defaults.
func plotPickup(pts []pickupPoint, dir string) error {
	if len(pts) == 0 {
		return fmt.Errorf("plot pickup.svg: no points")
	}
	p := plot.New()
	p.Title.Text = "insert to start at ferry's defaults, after a 2 s warm-up"
	p.X.Label.Text = "jobs inserted per second (jobs.Inserter, one per transaction)"
	p.Y.Label.Text = "ms"
	p50, p90, p99 := make(plotter.XYs, len(pts)), make(plotter.XYs, len(pts)), make(plotter.XYs, len(pts))
	for i, pt := range pts {
		x := float64(pt.Rate)
		p50[i], p90[i], p99[i] = plotter.XY{X: x, Y: pt.P50}, plotter.XY{X: x, Y: pt.P90}, plotter.XY{X: x, Y: pt.P99}
	}
	if err := plotutil.AddLinePoints(p, "p50", p50, "p90", p90, "p99", p99); err != nil {
		return err
	}
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	return savePlot(p, dir, "pickup.svg")
}

// plotFailover draws failover.svg: each trial's time, by fault, from
// the fault to the next leader's runnables.
func plotFailover(r failoverResult, dir string) error {
	series := []struct {
		name string
		ms   []float64
	}{
		{"graceful stop", r.GracefulMS},
		{"kill -9", r.CrashMS},
		{"lock lost: to the demotion", r.DemotionMS},
		{"leader partitioned", r.PartitionMS},
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("leader failover, tick %d ms: each trial", r.TickMS)
	p.Y.Label.Text = "ms from the fault to the next leader (or the demotion)"
	var names []string
	var args []any
	for _, s := range series {
		if len(s.ms) == 0 {
			continue
		}
		x := float64(len(names))
		pts := make(plotter.XYs, len(s.ms))
		for i, v := range s.ms {
			pts[i] = plotter.XY{X: x, Y: v}
		}
		names = append(names, s.name)
		args = append(args, s.name, pts)
	}
	if len(names) == 0 {
		return fmt.Errorf("plot failover.svg: no trials")
	}
	if err := plotutil.AddScatters(p, args...); err != nil {
		return err
	}
	p.NominalX(names...)
	p.Legend.Top = true
	p.Y.Min = 0
	return savePlot(p, dir, "failover.svg")
}
