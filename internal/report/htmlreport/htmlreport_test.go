package htmlreport

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/telemetry"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
	"github.com/amdahl-rt/amdahl/telemetry/spans"
)

// units builds n synthetic units of work through attribution's own tree
// builder: dispatch, then a send holding a far-side execute, then (with
// reply) a reply deserialize; their sizes vary with i.
func units(t *testing.T, n int, reply bool) []attribution.Work {
	t.Helper()
	var all []spans.Span
	const t0 = int64(1_700_000_000_000_000_000)
	ms := func(f float64) int64 { return t0 + int64(f*float64(time.Millisecond)) }
	for i := 0; i < n; i++ {
		var tid spans.TraceID
		tid[0], tid[1] = byte(i>>8), byte(i)
		id := func(k byte) spans.SpanID { return spans.SpanID{k, byte(i >> 8), byte(i)} }
		d := float64(i % 7)
		all = append(all,
			spans.Span{TraceID: tid, SpanID: id(1), Name: telemetry.SpanWork, Start: ms(0), End: ms(20 + d)},
			spans.Span{TraceID: tid, SpanID: id(2), ParentID: id(1), Component: "runtime", Phase: telemetry.Dispatch, Start: ms(0), End: ms(2)},
			spans.Span{TraceID: tid, SpanID: id(3), ParentID: id(1), Component: "ipc", Phase: telemetry.Send, Direction: telemetry.Request, Start: ms(2), End: ms(15 + d)},
			spans.Span{TraceID: tid, SpanID: id(4), ParentID: id(3), Component: "taskhost", Phase: telemetry.Execute, Start: ms(4), End: ms(12 + d)},
		)
		if reply {
			all = append(all, spans.Span{TraceID: tid, SpanID: id(5), ParentID: id(1), Component: "ipc", Phase: telemetry.Deserialize,
				Direction: telemetry.Reply, Start: ms(15 + d), End: ms(19 + d)})
		}
	}
	works, _ := attribution.Trees(all)
	if len(works) != n {
		t.Fatalf("built %d units, want %d", len(works), n)
	}
	return works
}

// input is a page with every section: a report, an A/B comparison (with
// undefined intervals), two sets and profiles.
func input(t *testing.T) Input {
	works := units(t, 50, true)
	rep := attribution.Summarize(works)
	fl := &attribution.Flame{}
	for _, w := range works {
		fl.Add(w)
	}
	cand := units(t, 40, false) // no reply deserialize: its r is undefined
	c, err := attribution.Compare(attribution.Side{Runs: [][]attribution.Work{works}}, attribution.Side{Runs: [][]attribution.Work{cand}},
		attribution.CompareOptions{Target: []string{"ipc"}, Iterations: 50})
	if err != nil {
		t.Fatal(err)
	}
	return Input{
		Title:      "test <page>",
		Facts:      []Fact{{Name: "scenario", Value: "synthetic & small"}},
		Report:     &rep,
		Comparison: &c,
		Sets:       []Set{NewSet("all units", fl, false, Mark{Name: "p50", At: rep.E2EP50}), NewSet("folded", fl, true)},
		Profiles: []PhaseFuncs{
			{Phase: "execute", Unit: "nanoseconds", Total: 4_000_000_000, Funcs: []Func{
				{Name: "main.(*worker).<hash>", Flat: 2_500_000_000, Cum: 3_000_000_000},
				{Name: "runtime.memmove", Flat: 500_000_000, Cum: 500_000_000},
			}},
			{Phase: "serialize", Unit: "bytes", Total: 3 << 20, Funcs: []Func{{Name: "proto.Marshal", Flat: 1 << 20, Cum: 2 << 20}}},
		},
	}
}

func render(t *testing.T, in Input) string {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, in); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestSelfContained: nothing on the page is fetched from anywhere: no
// src, href or CSS url() to another document, no <link>, no external
// script.
func TestSelfContained(t *testing.T) {
	page := render(t, input(t))
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`(?i)\b(src|href|xlink:href|action)\s*=\s*["']?\s*(https?:)?//`),
		regexp.MustCompile(`(?i)\b(src|href)\s*=\s*["']?[a-z]+:`), // any scheme at all
		regexp.MustCompile(`(?i)<link\b`),
		regexp.MustCompile(`(?i)<script[^>]*\bsrc\s*=`),
		regexp.MustCompile(`(?i)url\(`),
		regexp.MustCompile(`(?i)@import`),
		regexp.MustCompile(`(?i)<(iframe|img|object|embed)\b`),
	} {
		if m := re.FindString(page); m != "" {
			t.Errorf("page refers outside itself: %q (%s)", m, re)
		}
	}
	// The check itself: a page with an external script is caught.
	bad := strings.Replace(page, "<script>", `<script src="https://example.com/x.js">`, 1)
	if !regexp.MustCompile(`(?i)\b(src|href)\s*=\s*["']?\s*(https?:)?//`).MatchString(bad) {
		t.Fatal("the external-reference check misses an external script")
	}
	for _, want := range []string{`id="attribution-table"`, `id="comparison-table"`, `id="q-chart"`, `id="ab-chart"`, `figure class="hist"`,
		`figure class="flame"`, `id="profiles"`, `id="amdahl-data"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}

// TestEscaped: names from the input are text, never markup.
func TestEscaped(t *testing.T) {
	in := input(t)
	in.Profiles[0].Funcs[0].Name = `</script><script>alert(1)</script>`
	page := render(t, in)
	if strings.Contains(page, "<script>alert(1)") || strings.Contains(page, "test <page>") {
		t.Error("input text reached the page as markup")
	}
	if !strings.Contains(page, "test &lt;page&gt;") {
		t.Error("the title is not on the page, escaped")
	}
}

// TestDataBlock: the embedded JSON is the input, as its own JSON.
func TestDataBlock(t *testing.T) {
	in := input(t)
	page := render(t, in)
	m := regexp.MustCompile(`(?s)<script type="application/json" id="amdahl-data">(.*?)</script>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no data block")
	}
	var got, want any
	if err := json.Unmarshal([]byte(m[1]), &got); err != nil {
		t.Fatalf("data block is not JSON: %v", err)
	}
	b, _ := json.Marshal(in)
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	gb, _ := json.Marshal(got)
	wb, _ := json.Marshal(want)
	if !bytes.Equal(gb, wb) {
		t.Errorf("data block differs from the input's JSON")
	}
}

// cells maps data-row → data-field → (text, data-v) of a table.
func cells(t *testing.T, page, table string) map[string]map[string][2]string {
	t.Helper()
	i := strings.Index(page, `id="`+table+`"`)
	if i < 0 {
		t.Fatalf("no table %s", table)
	}
	body := page[i : i+strings.Index(page[i:], "</table>")]
	out := map[string]map[string][2]string{}
	rowRe := regexp.MustCompile(`(?s)<tr data-row="([^"]*)"[^>]*>(.*?)</tr>`)
	cellRe := regexp.MustCompile(`(?s)<(?:td|span) data-field="([^"]*)" data-v="([^"]*)"[^>]*>(.*?)</(?:td|span)>`)
	for _, r := range rowRe.FindAllStringSubmatch(body, -1) {
		m := map[string][2]string{}
		for _, c := range cellRe.FindAllStringSubmatch(r[2], -1) {
			m[c[1]] = [2]string{strings.ReplaceAll(c[3], "&#43;", "+"), c[2]}
		}
		out[r[1]] = m
	}
	return out
}

// TestNumbersAsTheTextTable: each row's cells show what attribution's
// text table prints for it, and carry the JSON's raw values.
func TestNumbersAsTheTextTable(t *testing.T) {
	in := input(t)
	page := render(t, in)
	var text bytes.Buffer
	if err := in.Report.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{} // a row's name (which may hold spaces: gaps), then its cells
	for _, l := range strings.Split(text.String(), "\n") {
		l = strings.TrimSpace(l)
		for _, r := range append(slices.Clone(in.Report.Rows), in.Report.Gaps...) {
			if rest, ok := strings.CutPrefix(l, r.Name+" "); ok {
				lines[r.Name] = append([]string{r.Name}, strings.Fields(rest)...)
			}
		}
	}
	got := cells(t, page, "attribution-table")
	rows := append(slices.Clone(in.Report.Rows), in.Report.Gaps...)
	if len(got) != len(rows) {
		t.Fatalf("%d rows on the page, %d in the report", len(got), len(rows))
	}
	for _, r := range rows {
		f, c := lines[r.Name], got[r.Name]
		want := map[string]string{"critical_per_work": f[4], "q": f[5]}
		if r.Key.Phase.Valid() {
			want["spans"], want["mean"], want["p99"], want["naive_share"] = f[1], f[2], f[3], f[6]
		}
		for field, w := range want {
			if c[field][0] != w {
				t.Errorf("%s %s: page %q, text table %q", r.Name, field, c[field][0], w)
			}
		}
		if c["q"][1] != raw(r.Q) || c["mean"][1] != raw(r.Mean) && r.Key.Phase.Valid() {
			t.Errorf("%s: data-v q %q mean %q, want %v %d", r.Name, c["q"][1], c["mean"][1], r.Q, r.Mean)
		}
	}
	var ctext bytes.Buffer
	if err := in.Comparison.WriteText(&ctext); err != nil {
		t.Fatal(err)
	}
	ab := cells(t, page, "comparison-table")
	undefined := 0
	for _, r := range in.Comparison.Rows {
		line := ""
		for _, l := range strings.Split(ctext.String(), "\n") {
			if strings.HasPrefix(strings.TrimPrefix(strings.TrimSpace(l), "* "), r.Name+" ") {
				line = l
				break // the table's line, not the verdict's
			}
		}
		for _, field := range []string{"q", "r", "qr", "critical_delta", "baseline_own_per_work"} {
			if !strings.Contains(line, ab[r.Name][field][0]) {
				t.Errorf("%s %s: page %q not in the text line %q", r.Name, field, ab[r.Name][field][0], line)
			}
		}
		if !r.R.Defined() {
			undefined++
		}
		if !r.R.Defined() && (ab[r.Name]["r"][0] != "-" || ab[r.Name]["r"][1] != "") {
			t.Errorf("%s: undefined r shown as %q (data-v %q), want - and none", r.Name, ab[r.Name]["r"][0], ab[r.Name]["r"][1])
		}
	}
	if undefined == 0 {
		t.Error("no row with an undefined r: the case is not tested")
	}
	if ab["measured"]["gain"][1] != raw(in.Comparison.Measured.Value) {
		t.Errorf("measured gain data-v %q, want %v", ab["measured"]["gain"][1], in.Comparison.Measured.Value)
	}
}

// TestProfilesSection: the top functions of each phase, with their
// shares of the phase, and no section without profiles.
func TestProfilesSection(t *testing.T) {
	in := input(t)
	page := render(t, in)
	i := strings.Index(page, `id="profiles"`)
	if i < 0 {
		t.Fatal("no profiles section")
	}
	sec := page[i:]
	for _, want := range []string{`data-phase="execute"`, "main.(*worker).&lt;hash&gt;", "2.5s", "62.5%", "3s", "75.0%", "runtime.memmove",
		`data-phase="serialize"`, "proto.Marshal", "1.0 MiB", "33.3%", "2.0 MiB", "66.7%", "3.0 MiB"} {
		if !strings.Contains(sec, want) {
			t.Errorf("profiles section lacks %q", want)
		}
	}
	if !regexp.MustCompile(`data-field="flat" data-v="2500000000"`).MatchString(sec) {
		t.Error("flat value's data-v missing")
	}
	in.Profiles = nil
	if page := render(t, in); strings.Contains(page, `id="profiles"`) {
		t.Error("a page without profiles has a profiles section")
	}
}

// TestFlameChart: the frames drawn are the graph's, widths as shares of
// the root, each child inside its parent.
func TestFlameChart(t *testing.T) {
	in := input(t)
	g := in.Sets[0].Flame
	fc := flame(g)
	if fc == nil || len(fc.Frames) < 4 {
		t.Fatalf("flame chart %+v", fc)
	}
	if fc.Frames[0].Name != "e2e" || fc.Frames[0].W != 1 || fc.Frames[0].CriticalRaw != raw(g.Root.Critical) {
		t.Errorf("first frame %+v, want the root, full width", fc.Frames[0])
	}
	byName := map[string]flameRect{}
	for _, f := range fc.Frames {
		byName[f.Name] = f
	}
	send, exec := byName["ipc.send/request"], byName["taskhost.execute"]
	if exec.Depth != send.Depth+1 && exec.Depth != 1 {
		t.Errorf("execute at depth %d, send at %d", exec.Depth, send.Depth)
	}
	var sum float64
	for _, f := range fc.Frames {
		if f.Depth == 1 {
			sum += f.W
		}
		if f.X < 0 || f.X+f.W > 1+1e-9 {
			t.Errorf("frame %s [%v, %v] outside the root", f.Name, f.X, f.X+f.W)
		}
	}
	if self := float64(g.Root.Self) / float64(g.Root.Critical); math.Abs(sum+self-1) > 1e-9 {
		t.Errorf("depth-1 frames cover %v and the root's own time %v: want all of it", sum, self)
	}
	// Bounded: a graph with more frames than MaxFlameFrames draws the
	// widest.
	wide := attribution.FlameGraph{Units: 1, Root: attribution.Frame{Name: "e2e", Critical: time.Duration(MaxFlameFrames + 10)}}
	for i := 0; i < MaxFlameFrames+10; i++ {
		wide.Root.Children = append(wide.Root.Children, attribution.Frame{Name: "f", Critical: 1, Self: 1})
	}
	if fc := flame(wide); len(fc.Frames) != MaxFlameFrames || fc.Left != 11 {
		t.Errorf("%d frames drawn, %d left out; want %d and 11", len(fc.Frames), fc.Left, MaxFlameFrames)
	}
}

// TestHistogramChart: one bar per bin, heights by count, marks placed.
func TestHistogramChart(t *testing.T) {
	in := input(t)
	s := in.Sets[0]
	h := histogram(s)
	if len(h.Bars) != len(s.E2E) || len(h.Marks) != 1 {
		t.Fatalf("%d bars %d marks, want %d and 1", len(h.Bars), len(h.Marks), len(s.E2E))
	}
	var top uint64
	for _, b := range s.E2E {
		top = max(top, b.Count)
	}
	for i, b := range h.Bars {
		wantH := float64(b.Count) / float64(top) * float64(h.Base-10)
		if b.Count != s.E2E[i].Count || math.Abs(b.H-wantH) > 1e-9 || math.Abs(b.Y+b.H-float64(h.Base)) > 1e-9 {
			t.Errorf("bar %d: %+v for bin %+v", i, b, s.E2E[i])
		}
		if i > 0 && b.X < h.Bars[i-1].X {
			t.Errorf("bar %d left of bar %d", i, i-1)
		}
	}
}

func TestWriteFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "report.html")
	if err := WriteFile(p, input(t)); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !bytes.HasPrefix(b, []byte("<!DOCTYPE html>")) {
		t.Fatalf("report.html: %v, starts %q", err, b[:min(len(b), 20)])
	}
	// Never through a link at its name.
	link := filepath.Join(t.TempDir(), "link.html")
	if err := os.Symlink(filepath.Join(t.TempDir(), "elsewhere"), link); err != nil {
		t.Skip(err)
	}
	if err := WriteFile(link, input(t)); err == nil {
		t.Error("WriteFile followed a link")
	}
}
