package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// series is one named set of values: bar heights, or points.
type series struct {
	name string
	ys   []float64
	xs   []float64 // for lines and scatters
}

const plotW, plotH = 7 * vg.Inch, 4 * vg.Inch

func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.YOffs = -vg.Points(12)
	p.Legend.XOffs = vg.Points(8)
	p.Add(plotter.NewGrid())
	return p
}

// barChart draws groups of bars: one bar per series in each group.
func barChart(path, title, ylabel string, groups []string, ss []series) error {
	p := newPlot(title, "", ylabel)
	w := vg.Points(min(40, 240/float64(len(groups)*len(ss))))
	for i, s := range ss {
		vals := make(plotter.Values, len(s.ys))
		for j, y := range s.ys {
			if math.IsNaN(y) {
				y = 0
			}
			vals[j] = y
		}
		bc, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bc.LineStyle.Width = 0
		bc.Color = plotutil.Color(i)
		bc.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(bc)
		p.Legend.Add(s.name, bc)
	}
	p.NominalX(groups...)
	p.Y.Min = 0
	return p.Save(vg.Length(math.Max(float64(plotW), float64(vg.Inch)*float64(len(groups)))), plotH, path)
}

// lineChart draws each series as a line with points.
func lineChart(path, title, xlabel, ylabel string, logX bool, ss []series) error {
	p := newPlot(title, xlabel, ylabel)
	if logX {
		p.X.Scale = plot.LogScale{}
		seen := map[float64]bool{}
		var ticks []plot.Tick
		for _, s := range ss {
			for _, x := range s.xs {
				if !seen[x] {
					seen[x] = true
					label := fmt.Sprintf("%g", x)
					if x >= 1000 {
						label = countLabel(int(x))
					}
					ticks = append(ticks, plot.Tick{Value: x, Label: label})
				}
			}
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Padding = vg.Points(20)
	}
	for i, s := range ss {
		xys := make(plotter.XYs, 0, len(s.ys))
		for j := range s.ys {
			if !math.IsNaN(s.ys[j]) {
				xys = append(xys, plotter.XY{X: s.xs[j], Y: s.ys[j]})
			}
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		l.Dashes = plotutil.Dashes(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	p.Y.Min = 0
	return p.Save(plotW, plotH, path)
}

// scatterChart draws points, and horizontal reference lines.
func scatterChart(path, title, xlabel, ylabel string, ss []series, refs []series) error {
	p := newPlot(title, xlabel, ylabel)
	xmax := 0.0
	for i, s := range ss {
		xys := make(plotter.XYs, len(s.ys))
		for j := range s.ys {
			xys[j] = plotter.XY{X: s.xs[j], Y: s.ys[j]}
			xmax = math.Max(xmax, s.xs[j])
		}
		sc, err := plotter.NewScatter(xys)
		if err != nil {
			return err
		}
		sc.Color = plotutil.Color(i)
		sc.Shape = draw.CircleGlyph{}
		sc.Radius = vg.Points(1.5)
		p.Add(sc)
		p.Legend.Add(s.name, sc)
	}
	for i, r := range refs {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: r.ys[0]}, {X: xmax, Y: r.ys[0]}})
		if err != nil {
			return err
		}
		l.Color = color.RGBA{A: 255, R: uint8(200 * (i % 2)), B: 160}
		l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(l)
		p.Legend.Add(r.name, l)
	}
	p.Y.Min = 0
	return p.Save(plotW, plotH, path)
}
