package main

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/amdahl-rt/amdahl/runtime"
	"github.com/amdahl-rt/amdahl/telemetry/attribution"
)

// chromium returns the path of the Debian chromium binary; the test is
// skipped without it, except in CI (.ci/run installs it), where that
// fails.
func chromium(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium not on PATH (CI installs the Debian package chromium)")
		}
		t.Skip("chromium not on PATH: install the Debian package chromium to check report.html in a browser")
	}
	return p
}

// cell is one number of the page: its text and raw value (data-v).
type cell struct {
	Text string `json:"text"`
	V    string `json:"v"`
	Lo   string `json:"lo"`
	Hi   string `json:"hi"`
}

// pageDOM is what the browser shows of a report.html.
type pageDOM struct {
	Rows       map[string]map[string]cell `json:"rows"`         // attribution table: row → field → cell
	E2E        map[string]cell            `json:"e2e"`          // the e2e line above it
	ABRows     map[string]map[string]cell `json:"ab_rows"`      // comparison table
	Flames     map[string]string          `json:"flames"`       // set → the root frame's data-critical
	FlameFrame int                        `json:"flame_frames"` // frames drawn
	HistCounts map[string]int             `json:"hist_counts"`  // set → Σ bin counts
	Resources  int                        `json:"resources"`    // subresources the page fetched
	Detail     string                     `json:"detail"`       // the flame detail line after a click
	Hidden     int                        `json:"hidden"`       // flame frames hidden by the click's zoom
}

const domScript = `(() => {
  const cell = (td) => ({text: td.textContent.trim(), v: td.dataset.v || "", lo: td.dataset.lo || "", hi: td.dataset.hi || ""});
  const rows = (sel) => {
    const out = {};
    for (const tr of document.querySelectorAll(sel + " tr[data-row]")) {
      const m = {};
      for (const td of tr.querySelectorAll("[data-field]")) m[td.dataset.field] = cell(td);
      out[tr.dataset.row] = m;
    }
    return out;
  };
  const e2e = {};
  for (const s of document.querySelectorAll("#e2e-summary [data-field]")) e2e[s.dataset.field] = cell(s);
  const flames = {}, hist = {};
  for (const f of document.querySelectorAll("figure.flame")) flames[f.dataset.set] = f.querySelector("g.frame[data-depth='0']").dataset.critical;
  for (const f of document.querySelectorAll("figure.hist")) {
    let n = 0;
    for (const r of f.querySelectorAll("rect.bin")) n += parseInt(r.dataset.count, 10);
    hist[f.dataset.set] = n;
  }
  const detail = document.querySelector(".flame-detail");
  return {rows: rows("#attribution-table"), e2e: e2e, ab_rows: rows("#comparison-table"), flames: flames,
    flame_frames: document.querySelectorAll("g.frame").length, hist_counts: hist,
    resources: performance.getEntriesByType("resource").length, detail: detail ? detail.textContent : "",
    hidden: document.querySelectorAll("figure.flame g.frame.hidden").length};
})()`

// newBrowser starts headless Chromium for the test (closed at its end):
// no sandbox or GPU, nothing fetched in the background, a fresh profile.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1300, 1000))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(func() { bcancel(); acancel(); cancel() })
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("chromium: start: %v", err)
	}
	return bctx
}

// browse loads file in a new tab of browser, clicks the first frame below
// the root of the first flame graph, fails on any console error or
// uncaught exception, writes a screenshot into the test's temp dir and
// returns what the page shows.
func browse(t *testing.T, browser context.Context, file string) pageDOM {
	t.Helper()
	var mu sync.Mutex
	var problems []string
	tctx, tcancel := chromedp.NewContext(browser, chromedp.WithListener(func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *cdpruntime.EventConsoleAPICalled:
			if e.Type == cdpruntime.ConsoleAPICalledTypeError || e.Type == cdpruntime.ConsoleAPICalledTypeAssert {
				var args []string
				for _, a := range e.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, "console."+string(e.Type)+": "+strings.Join(args, " "))
			}
		case *cdpruntime.EventExceptionThrown:
			msg := e.ExceptionDetails.Text
			if e.ExceptionDetails.Exception != nil {
				msg += " " + e.ExceptionDetails.Exception.Description
			}
			problems = append(problems, "exception: "+msg)
		case *log.EventEntryAdded:
			if e.Entry.Level == log.EntryLevelError {
				problems = append(problems, "log: "+e.Entry.Text+" "+e.Entry.URL)
			}
		}
	}))
	defer tcancel()
	bctx := tctx
	abs, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate("file://"+abs), chromedp.WaitReady("body")); err != nil {
		t.Fatalf("chromium: load %s: %v", file, err)
	}
	if err := chromedp.Do(bctx, chromedp.Click(`figure.flame g.frame[data-depth="1"]`)); err != nil {
		t.Fatalf("chromium: click a flame frame: %v", err)
	}
	dom, err := chromedp.Run(bctx, chromedp.Evaluate[pageDOM](domScript))
	if err != nil {
		t.Fatalf("chromium: read the page: %v", err)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("chromium: screenshot: %v", err)
	}
	png1 := filepath.Join(t.TempDir(), strings.TrimSuffix(filepath.Base(file), ".html")+".png")
	if err := os.WriteFile(png1, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s (%d bytes)", png1, len(shot))
	checkScreenshot(t, shot)
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("%s: %s", file, p)
	}
	if dom.Resources != 0 {
		t.Errorf("%s fetched %d resources; want none (self-contained)", file, dom.Resources)
	}
	if !strings.Contains(dom.Detail, "per unit on the critical path") {
		t.Errorf("flame detail after a click %q: the page's script did not run", dom.Detail)
	}
	if dom.Hidden == 0 {
		t.Errorf("no flame frame hidden after a click on a frame narrower than the root: no zoom")
	}
	return dom
}

// checkScreenshot: a PNG of a drawn page, not a blank one.
func checkScreenshot(t *testing.T, b []byte) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	colors := map[[3]uint32]bool{}
	r := img.Bounds()
	for y := r.Min.Y; y < r.Max.Y; y += 7 {
		for x := r.Min.X; x < r.Max.X; x += 7 {
			c0, c1, c2, _ := img.At(x, y).RGBA()
			colors[[3]uint32{c0 >> 8, c1 >> 8, c2 >> 8}] = true
		}
	}
	if r.Dy() < 1000 || len(colors) < 20 {
		t.Errorf("screenshot %dx%d with %d colours: the page looks empty", r.Dx(), r.Dy(), len(colors))
	}
}

// tableLines maps each row name of the first text table in out (amdahl's
// aligned table) to its line.
func tableLines(out string) map[string]string {
	lines := map[string]string{}
	in := false
	for _, l := range strings.Split(out, "\n") {
		f := fieldsOf(l)
		switch {
		case len(f) > 0 && f[0] == "row":
			in = true
		case in && (len(f) == 0 || f[0] == "total"):
			return lines
		case in:
			lines[strings.TrimPrefix(f[0], "*")] = l
			if f[0] == "*" && len(f) > 1 {
				lines[f[1]] = l
			}
		}
	}
	return lines
}

// fieldsOf is a table line's cells; a gap's name, which holds spaces, is
// one (up to its first "-" cell).
func fieldsOf(line string) []string {
	f := strings.Fields(line)
	if len(f) > 0 && f[0] == "gap" {
		if k := slices.Index(f, "-"); k > 0 {
			return append([]string{strings.Join(f[:k], " ")}, f[k:]...)
		}
	}
	return f
}

func rawEq(t *testing.T, what, got string, want any) {
	t.Helper()
	var w string
	switch x := want.(type) {
	case float64:
		g, err := strconv.ParseFloat(got, 64)
		if err != nil || g != x {
			t.Errorf("%s: page data-v %q, want %v", what, got, x)
		}
		return
	case time.Duration:
		w = strconv.FormatInt(int64(x), 10)
	case int:
		w = strconv.Itoa(x)
	}
	if got != w {
		t.Errorf("%s: page data-v %q, want %s", what, got, w)
	}
}

// checkIval compares an interval's cell with its JSON (nil: undefined,
// shown as "-" with no data-v).
func checkIval(t *testing.T, what string, got cell, v, lo, hi *float64) {
	t.Helper()
	if v == nil {
		if got.V != "" || got.Text != "-" {
			t.Errorf("%s: undefined in JSON, page shows %q (data-v %q)", what, got.Text, got.V)
		}
		return
	}
	rawEq(t, what, got.V, *v)
	if lo != nil && hi != nil {
		rawEq(t, what+" lo", got.Lo, *lo)
		rawEq(t, what+" hi", got.Hi, *hi)
	}
}

// TestReportHTMLInChromium: amdahl run --out writes report.html, which
// loads in headless Chromium with no console error and shows the numbers
// of summary.json, formatted as the run's own table; then amdahl report
// --html for an A/B of the run's trace against itself shows those of
// report --json.
func TestReportHTMLInChromium(t *testing.T) {
	chromium(t)
	dir := filepath.Join(t.TempDir(), "out")
	code, out, errs := runCLI(t, "run", "--scenario", "mixed", "--set", "scenario.count=200", "--set", "runtime.nodes=2", "--out", dir, "--progress", "never")
	if code != exitOK {
		t.Fatalf("run: exit %d; stderr %q", code, errs)
	}
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum runtime.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "report.html")
	browser := newBrowser(t)
	dom := browse(t, browser, page)

	checkRunPage(t, dom, sum.Attribution, out)
	// report --html: an A/B of the run's trace file against itself.
	checkReportABPage(t, browser, filepath.Join(dir, "trace.jsonl"), sum.Attribution)
}

// checkRunPage: run --out's page shows every row and gap of summary.json
// (a), with its raw values, and their text as the run's table (out)
// prints it; its e2e figures, flame graph root and histogram are a's.
func checkRunPage(t *testing.T, dom pageDOM, a attribution.Report, out string) {
	t.Helper()
	lines := tableLines(out)
	rows := append(slices.Clone(a.Rows), a.Gaps...) // other's gaps are rows on the page
	if len(a.Rows) < 5 || len(a.Gaps) == 0 || len(dom.Rows) != len(rows) {
		t.Fatalf("page shows %d rows, summary.json has %d and %d gaps", len(dom.Rows), len(a.Rows), len(a.Gaps))
	}
	for _, r := range rows {
		got, ok := dom.Rows[r.Name]
		if !ok {
			t.Errorf("row %s of summary.json is not on the page", r.Name)
			continue
		}
		rawEq(t, r.Name+" q", got["q"].V, r.Q)
		rawEq(t, r.Name+" critical/work", got["critical_per_work"].V, r.CriticalPerWork)
		// The text as the run's own table prints it (spans mean p99
		// critical/work q naive; "other" has - for the first three).
		f := fieldsOf(lines[r.Name])
		cpuText := ""
		if a.CPU != nil && len(f) == 8 {
			// cpu/work after critical/work: the --out run's CPU profiles.
			cpuText, f = f[5], append(f[:5:5], f[6:]...)
		}
		if len(f) != 7 || (a.CPU != nil) != (cpuText != "") {
			t.Errorf("row %s: no line in the run's table: %q", r.Name, lines[r.Name])
			continue
		}
		want := map[string]string{"critical_per_work": f[4], "q": f[5]}
		if cpuText != "" && r.Key.IsRow() {
			rawEq(t, r.Name+" cpu/work", got["cpu_per_work"].V, r.CPUPerWork)
			want["cpu_per_work"] = cpuText
		}
		if f[1] != "-" {
			rawEq(t, r.Name+" spans", got["spans"].V, r.Spans)
			rawEq(t, r.Name+" mean", got["mean"].V, r.Mean)
			rawEq(t, r.Name+" p99", got["p99"].V, r.P99)
			rawEq(t, r.Name+" naive", got["naive_share"].V, r.Naive)
			want["spans"], want["mean"], want["p99"], want["naive_share"] = f[1], f[2], f[3], f[6]
		}
		for field, w := range want {
			if got[field].Text != w {
				t.Errorf("row %s %s: page shows %q, the run's table %q", r.Name, field, got[field].Text, w)
			}
		}
	}
	rawEq(t, "works", dom.E2E["works"].V, a.Works)
	rawEq(t, "e2e p50", dom.E2E["e2e_p50"].V, a.E2EP50)
	rawEq(t, "e2e p99", dom.E2E["e2e_p99"].V, a.E2EP99)
	rawEq(t, "e2e mean", dom.E2E["e2e_mean"].V, a.E2EMean)
	if !strings.Contains(out, "p50 "+dom.E2E["e2e_p50"].Text) || !strings.Contains(out, "p99 "+dom.E2E["e2e_p99"].Text) {
		t.Errorf("page e2e p50 %q p99 %q: not as the run prints them", dom.E2E["e2e_p50"].Text, dom.E2E["e2e_p99"].Text)
	}
	// The flame graph's root is every attributed unit's e2e; the
	// histogram counts every unit.
	rawEq(t, "flame root", dom.Flames["all units"], a.E2ETotal)
	if dom.HistCounts["all units"] != a.Works {
		t.Errorf("e2e histogram counts %d units, summary.json %d", dom.HistCounts["all units"], a.Works)
	}
	if dom.FlameFrame < 5 {
		t.Errorf("flame graph has %d frames", dom.FlameFrame)
	}

}

// checkReportABPage: amdahl report --html of an A/B of trace against itself
// shows every row's q, r and q·r and the three gains with the intervals
// of report --json, as its text prints them; both sides' flame graph and
// histogram hold a's units.
func checkReportABPage(t *testing.T, browser context.Context, trace string, a attribution.Report) {
	t.Helper()
	abPage := filepath.Join(t.TempDir(), "ab.html")
	code, jout, errs := runCLI(t, "report", "--json", "--html", abPage, "--baseline", trace, "--target", "ipc", trace)
	if code != exitOK {
		t.Fatalf("report --html: exit %d; stderr %q", code, errs)
	}
	// The intervals as JSON has them: null where undefined.
	type ival struct{ Value, Lo, Hi *float64 }
	var rep struct {
		Comparison struct {
			Rows []struct {
				Name     string `json:"row"`
				Q, R, QR ival
			} `json:"rows"`
			FirstOrder ival `json:"predicted_first_order"`
			Replay     ival `json:"predicted_replay"`
			Measured   ival `json:"measured"`
		} `json:"comparison"`
	}
	if err := json.Unmarshal([]byte(jout), &rep); err != nil {
		t.Fatalf("report --json: %v", err)
	}
	code, tout, errs := runCLI(t, "report", "--baseline", trace, "--target", "ipc", trace)
	if code != exitOK {
		t.Fatalf("report: exit %d; stderr %q", code, errs)
	}
	dom := browse(t, browser, abPage)
	c := rep.Comparison
	if len(c.Rows) < 5 || len(dom.ABRows) != len(c.Rows)+3 { // and the three gain lines
		t.Fatalf("page shows %d A/B rows, report --json %d (+3 gains)", len(dom.ABRows), len(c.Rows))
	}
	lines := tableLines(tout)
	for _, r := range c.Rows {
		got := dom.ABRows[r.Name]
		line := lines[r.Name]
		for name, iv := range map[string]ival{"q": r.Q, "r": r.R, "qr": r.QR} {
			checkIval(t, r.Name+" "+name, got[name], iv.Value, iv.Lo, iv.Hi)
			if !strings.Contains(line, got[name].Text) {
				t.Errorf("row %s %s: page shows %q, not in the table line %q", r.Name, name, got[name].Text, line)
			}
		}
	}
	for name, iv := range map[string]ival{"measured": c.Measured, "predicted_replay": c.Replay, "predicted_first_order": c.FirstOrder} {
		checkIval(t, name, dom.ABRows[name]["gain"], iv.Value, iv.Lo, iv.Hi)
		if !strings.Contains(tout, dom.ABRows[name]["gain"].Text) {
			t.Errorf("%s: page shows %q, not in report's text", name, dom.ABRows[name]["gain"].Text)
		}
	}
	for _, side := range []string{"baseline", "candidate"} {
		rawEq(t, side+" flame root", dom.Flames[side], a.E2ETotal) // the same units on both sides
		if dom.HistCounts[side] != a.Works {
			t.Errorf("%s histogram counts %d units, want %d", side, dom.HistCounts[side], a.Works)
		}
	}
}
