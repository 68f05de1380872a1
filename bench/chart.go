// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"slices"
	"strings"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Chart geometry, in pixels: a plot area inside margins wide enough for the tick labels.
const (
	chartW, chartH = 880, 520
	left, right    = 80, 230
	top, bottom    = 50, 60
)

var (
	white = color.RGBA{255, 255, 255, 255}
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{220, 220, 220, 255}
	// One colour per shim; containerd 2.x's lines are dashed.
	shimColour = [2]color.RGBA{{0, 110, 200, 255}, {210, 60, 40, 255}}
)

// series is one line: a shim under one containerd.
type series struct {
	label  string
	colour color.RGBA
	dashed bool
	points [][2]float64 // container count, MiB
}

// chart draws the shims' summed PSS against the number of containers (one shim each), a line per
// shim and containerd generation, as a PNG.
func (res *results) chart() ([]byte, error) {
	var lines []series
	maxX, maxY := 1.0, 1.0
	for gi, g := range res.gens {
		for k, name := range []string{"final", "reference"} {
			s := series{label: fmt.Sprintf("%s, %s", name, strings.TrimPrefix(g.name, "containerd ")), colour: shimColour[k], dashed: gi%2 == 1}
			counts := make([]int, 0, len(g.pss[k]))
			for n := range g.pss[k] {
				counts = append(counts, n)
			}
			slices.Sort(counts)
			for _, n := range counts {
				s.points = append(s.points, [2]float64{float64(n), g.pss[k][n]})
				maxX, maxY = math.Max(maxX, float64(n)), math.Max(maxY, g.pss[k][n])
			}
			lines = append(lines, s)
		}
	}
	img := image.NewRGBA(image.Rect(0, 0, chartW, chartH))
	draw.Draw(img, img.Bounds(), &image.Uniform{white}, image.Point{}, draw.Src)
	x0, y0, x1, y1 := left, chartH-bottom, chartW-right, top
	yStep := niceStep(maxY / 5)
	yMax := math.Ceil(maxY/yStep) * yStep
	px := func(x float64) int { return x0 + int(math.Round(x/maxX*float64(x1-x0))) }
	py := func(y float64) int { return y0 - int(math.Round(y/yMax*float64(y0-y1))) }
	for y := 0.0; y <= yMax+yStep/2; y += yStep {
		line(img, x0, py(y), x1, py(y), grey, false)
		text(img, x0-8-7*len(label(y)), py(y)+4, label(y), black)
	}
	ticks := map[int]bool{}
	for _, s := range lines {
		for _, p := range s.points {
			ticks[int(p[0])] = true
		}
	}
	for n := range ticks {
		x := px(float64(n))
		line(img, x, y0, x, y0+5, black, false)
		text(img, x-7*len(fmt.Sprint(n))/2, y0+20, fmt.Sprint(n), black)
	}
	line(img, x0, y0, x1, y0, black, false)
	line(img, x0, y0, x0, y1, black, false)
	text(img, x0, 25, "shim PSS summed over shims (MiB) against running containers, one shim each", black)
	text(img, (x0+x1)/2-70, chartH-15, "containers (one shim each)", black)
	text(img, 10, y1-12, "MiB", black)
	for i, s := range lines {
		for j := 1; j < len(s.points); j++ {
			a, b := s.points[j-1], s.points[j]
			thick(img, px(a[0]), py(a[1]), px(b[0]), py(b[1]), s.colour, s.dashed)
		}
		for _, p := range s.points {
			draw.Draw(img, image.Rect(px(p[0])-3, py(p[1])-3, px(p[0])+4, py(p[1])+4), &image.Uniform{s.colour}, image.Point{}, draw.Src)
		}
		ly := y1 + 10 + 22*i
		thick(img, x1+15, ly, x1+45, ly, s.colour, s.dashed)
		text(img, x1+52, ly+4, s.label, black)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, fmt.Errorf("chart: %w", err)
	}
	return buf.Bytes(), nil
}

// niceStep rounds raw up to 1, 2 or 5 times a power of ten, for round tick values.
func niceStep(raw float64) float64 {
	if raw <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

func label(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func text(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// thick is a line two pixels wide.
func thick(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA, dashed bool) {
	line(img, xa, ya, xb, yb, c, dashed)
	line(img, xa, ya+1, xb, yb+1, c, dashed)
}

// line draws from (xa, ya) to (xb, yb) with Bresenham's algorithm; dashed leaves gaps of 5
// pixels after every 7.
func line(img *image.RGBA, xa, ya, xb, yb int, c color.RGBA, dashed bool) {
	dx, dy := abs(xb-xa), -abs(yb-ya)
	sx, sy := sign(xb-xa), sign(yb-ya)
	e := dx + dy
	for i := 0; ; i++ {
		if !dashed || i%12 < 7 {
			img.SetRGBA(xa, ya, c)
		}
		if xa == xb && ya == yb {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			xa += sx
		}
		if e2 <= dx {
			e += dx
			ya += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}
