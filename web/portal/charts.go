package portal

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fleetmq/fleetmq/history"
)

// Charts are inline SVG drawn here, with no script: they scale with their
// box (viewBox), take their colours from the stylesheet (class names), say
// what they show in an aria-label or <title>, and every chart has its
// numbers in a table next to it too.

// mixPct returns the QoS shares of m in percent.
func mixPct(m [3]int64) (total int64, pct [3]float64) {
	total = m[0] + m[1] + m[2]
	if total > 0 {
		for i := range m {
			pct[i] = float64(m[i]) * 100 / float64(total)
		}
	}
	return total, pct
}

// qosMixSVG is a stacked bar of a QoS mix.
func qosMixSVG(m [3]int64) template.HTML {
	total, pct := mixPct(m)
	var b strings.Builder
	if total == 0 {
		b.WriteString(`<svg class="mixbar" viewBox="0 0 100 8" preserveAspectRatio="none" role="img" aria-label="No messages"><rect class="track" width="100" height="8"/></svg>`)
		return template.HTML(b.String())
	}
	fmt.Fprintf(&b, `<svg class="mixbar" viewBox="0 0 100 8" preserveAspectRatio="none" role="img" aria-label="QoS 0 %s, QoS 1 %s, QoS 2 %s">`,
		fmtPct(pct[0]), fmtPct(pct[1]), fmtPct(pct[2]))
	b.WriteString(`<rect class="track" width="100" height="8"/>`)
	x := 0.0
	for q, v := range pct {
		if v == 0 {
			continue
		}
		fmt.Fprintf(&b, `<rect class="q%d" x="%.3f" width="%.3f" height="8"><title>QoS %d: %s (%s)</title></rect>`, q, x, v, q, fmtPct(v), num(m[q]))
		x += v
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// meterSVG is a progress bar of used out of size; the bar turns to the
// warning colour from 80% and the danger colour when full.
func meterSVG(used, size int64) template.HTML {
	frac := 0.0
	if size > 0 {
		frac = math.Min(float64(used)/float64(size), 1)
	} else if used > 0 {
		frac = 1
	}
	class := "ok"
	switch {
	case frac >= 1:
		class = "danger"
	case frac >= 0.8:
		class = "warn"
	}
	return template.HTML(fmt.Sprintf(`<svg class="meter" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true">`+
		`<rect class="track" width="100" height="8"/><rect class="fill %s" width="%.3f" height="8"/></svg>`, class, frac*100))
}

// dayBar is one day of the daily messages chart.
type dayBar struct {
	Day      string // YYYY-MM-DD
	Messages [3]int64
}

// Total is the day's messages.
func (d dayBar) Total() int64 { return d.Messages[0] + d.Messages[1] + d.Messages[2] }

// niceStep returns a round tick step (1, 2 or 5 times a power of ten) for
// about n ticks up to max.
func niceStep(max float64, n int) float64 {
	if max <= 0 {
		return 1
	}
	raw := max / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// fmtAxis formats an axis value compactly: 1.5k, 2M, 0.25.
func fmtAxis(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e9:
		return trimZero(v/1e9) + "G"
	case a >= 1e6:
		return trimZero(v/1e6) + "M"
	case a >= 1e4:
		return trimZero(v/1e3) + "k"
	}
	return trimZero(v)
}

func trimZero(v float64) string {
	s := strconv.FormatFloat(v, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	if s == "-0" {
		return "0"
	}
	return s
}

// Chart geometry (viewBox units).
const (
	chartW, chartH = 720.0, 240.0
	padL, padR     = 52.0, 12.0
	padT, padB     = 12.0, 28.0
)

// dailySVG is a stacked bar chart of messages per day by QoS.
func dailySVG(days []dayBar) template.HTML {
	var max int64
	for _, d := range days {
		max = int64(math.Max(float64(max), float64(d.Total())))
	}
	step := niceStep(float64(max), 4)
	top := math.Max(step*math.Ceil(float64(max)/step), step)
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %g %g" role="img" aria-labelledby="daily-title"><title id="daily-title">Messages per day by QoS, last %d days</title>`,
		chartW, chartH, len(days))
	axesY(&b, top, step, plotW, plotH, fmtAxis)
	if len(days) == 0 {
		b.WriteString(`</svg>`)
		return template.HTML(b.String())
	}
	slot := plotW / float64(len(days))
	bw := math.Max(slot*0.64, 2)
	every := int(math.Ceil(float64(len(days)) / 7))
	for i, d := range days {
		x := padL + float64(i)*slot + (slot-bw)/2
		y := padT + plotH
		for q := 0; q < 3; q++ {
			if d.Messages[q] == 0 {
				continue
			}
			h := float64(d.Messages[q]) / top * plotH
			y -= h
			fmt.Fprintf(&b, `<rect class="q%d" x="%.2f" y="%.2f" width="%.2f" height="%.2f"><title>%s: QoS %d %s</title></rect>`,
				q, x, y, bw, h, d.Day, q, num(d.Messages[q]))
		}
		// Label every few days counting back from the last (today), so
		// the last label never crowds the one before it.
		if (len(days)-1-i)%every == 0 {
			fmt.Fprintf(&b, `<text class="tick" x="%.2f" y="%.2f" text-anchor="middle">%s</text>`, x+bw/2, chartH-8, html.EscapeString(shortDay(d.Day)))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// shortDay turns 2026-03-10 into "Mar 10".
func shortDay(day string) string {
	t, err := time.Parse(time.DateOnly, day)
	if err != nil {
		return day
	}
	return t.Format("Jan 2")
}

// axesY draws the horizontal grid lines and the y labels from 0 to top.
func axesY(b *strings.Builder, top, step, plotW, plotH float64, label func(float64) string) {
	axesYFrom(b, 0, top, step, plotW, plotH, label)
}

func axesYFrom(b *strings.Builder, bottom, top, step, plotW, plotH float64, label func(float64) string) {
	for v := bottom; v <= top+step/1000; v += step {
		y := padT + plotH - (v-bottom)/(top-bottom)*plotH
		fmt.Fprintf(b, `<line class="grid" x1="%g" x2="%g" y1="%.2f" y2="%.2f"/>`, padL, padL+plotW, y, y)
		fmt.Fprintf(b, `<text class="tick" x="%g" y="%.2f" text-anchor="end">%s</text>`, padL-6, y+4, html.EscapeString(label(v)))
	}
}

// lineSVG draws the average of a numeric field per bucket as a line, with
// the min-max range as a band, over from..to.
func lineSVG(s *history.Series, from, to time.Time) template.HTML {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart line-chart" viewBox="0 0 %g %g" role="img" aria-labelledby="line-title"><title id="line-title">%s: average per %s from %s to %s</title>`,
		chartW, chartH, html.EscapeString(s.Field), html.EscapeString(fmtBucket(s.Bucket)), fmtTime(from), fmtTime(to))
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, bk := range s.Buckets {
		lo, hi = math.Min(lo, bk.Min), math.Max(hi, bk.Max)
	}
	if len(s.Buckets) == 0 {
		lo, hi = 0, 1
	}
	if hi == lo {
		lo, hi = lo-1, hi+1
	}
	step := niceStep(hi-lo, 4)
	bottom, top := step*math.Floor(lo/step), step*math.Ceil(hi/step)
	axesYFrom(&b, bottom, top, step, plotW, plotH, fmtAxis)
	span := to.Sub(from)
	xOf := func(t time.Time) float64 { return padL + float64(t.Sub(from))/float64(span)*plotW }
	yOf := func(v float64) float64 { return padT + plotH - (v-bottom)/(top-bottom)*plotH }
	// Time ticks.
	for i := 0; i <= 4; i++ {
		t := from.Add(span * time.Duration(i) / 4)
		anchor, class := "middle", "tick"
		if i == 0 {
			anchor = "start"
		} else if i == 4 {
			anchor = "end"
		}
		if i%2 == 1 {
			class = "tick tick-minor" // hidden on a narrow screen
		}
		fmt.Fprintf(&b, `<text class="%s" x="%.2f" y="%g" text-anchor="%s">%s</text>`, class, xOf(t), chartH-8, anchor, html.EscapeString(tickTime(t, span)))
	}
	if len(s.Buckets) > 0 {
		half := s.Bucket / 2
		// The band: max left to right, then min right to left.
		var band strings.Builder
		for i, bk := range s.Buckets {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&band, "%s%.2f %.2f ", cmd, xOf(bk.Start.Add(half)), yOf(bk.Max))
		}
		for i := len(s.Buckets) - 1; i >= 0; i-- {
			bk := s.Buckets[i]
			fmt.Fprintf(&band, "L%.2f %.2f ", xOf(bk.Start.Add(half)), yOf(bk.Min))
		}
		band.WriteString("Z")
		fmt.Fprintf(&b, `<path class="band" d="%s"/>`, band.String())
		var line strings.Builder
		for i, bk := range s.Buckets {
			cmd := "L"
			// A gap of more than two buckets breaks the line.
			if i == 0 || bk.Start.Sub(s.Buckets[i-1].Start) > 2*s.Bucket {
				cmd = "M"
			}
			fmt.Fprintf(&line, "%s%.2f %.2f ", cmd, xOf(bk.Start.Add(half)), yOf(bk.Avg))
		}
		fmt.Fprintf(&b, `<path class="line" d="%s"/>`, strings.TrimSpace(line.String()))
		if len(s.Buckets) <= 120 {
			for _, bk := range s.Buckets {
				fmt.Fprintf(&b, `<circle class="point" cx="%.2f" cy="%.2f" r="2.5"><title>%s: avg %s (min %s, max %s, %d values)</title></circle>`,
					xOf(bk.Start.Add(half)), yOf(bk.Avg), fmtTime(bk.Start), trimZero(bk.Avg), trimZero(bk.Min), trimZero(bk.Max), bk.Count)
			}
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// tickTime labels a time axis tick for a range of span.
func tickTime(t time.Time, span time.Duration) string {
	t = t.UTC()
	if span <= 36*time.Hour {
		return t.Format("15:04")
	}
	return t.Format("Jan 2 15:04")
}

// fmtBucket names a bucket size: "5 minutes", "1 hour".
func fmtBucket(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	}
	return plural(int(d/time.Second), "second")
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return strconv.Itoa(n) + " " + unit + "s"
}
