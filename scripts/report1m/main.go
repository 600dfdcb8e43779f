// Command report1m measures `amdahl report` on 1,000,000 spans (100,000
// units of work × 10 spans, in the shape of a taskhost run: dispatch, the
// host round trip with the host's synthesised spans, the completion),
// written as one line and as 1,000 lines; with -semconv, in the shape of
// three services traced with otelhttp/otelgrpc instead (a server root,
// three HTTP calls to cart and their server spans, a gRPC call to db and
// its server span, an internal span; no amdahl attribute), read with the
// semantic conventions' rows. It builds amdahl, writes both
// files into a temporary directory, runs the report on each as a separate
// process and prints its wall time and peak RSS (the kernel's rusage
// maxrss of the report process alone).
//
//	go run ./scripts/report1m [-units 100000] [-keep DIR] [-semconv]
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

func main() {
	units := flag.Int("units", 100_000, "units of work (10 spans each)")
	keep := flag.String("keep", "", "write the files here and keep them (default: a temporary directory, removed)")
	semconv := flag.Bool("semconv", false, "traces of services instrumented with otelhttp/otelgrpc, not amdahl's")
	writeOnly := flag.String("write", "", "only write the file of -units and -per-line here (the files are written by a child process)")
	perLineFlag := flag.Int("per-line", 0, "with -write: units per line")
	flag.Parse()
	write := write
	if *semconv {
		write = writeSemconv
	}
	if *writeOnly != "" {
		// A child of the measuring process: the report's peak RSS
		// (rusage) starts from its parent's peak at the fork, so the
		// parent stays small and leaves the writing (the -semconv
		// writer buffers a line) to this process.
		if _, err := write(*writeOnly, *units, max(*perLineFlag, 1)); err != nil {
			fail(err)
		}
		return
	}
	if *units < 1 || *units > 10_000_000 {
		fail(fmt.Errorf("-units %d: want 1 to 10000000", *units))
	}
	dir := *keep
	if dir == "" {
		d, err := os.MkdirTemp("", "report1m-")
		if err != nil {
			fail(err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bin := filepath.Join(dir, "amdahl")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/amdahl").CombinedOutput(); err != nil {
		fail(fmt.Errorf("build amdahl (run from the repository's root): %v\n%s", err, out))
	}
	for _, perLine := range []int{*units, *units / 1000} {
		perLine = max(perLine, 1)
		path := filepath.Join(dir, fmt.Sprintf("trace-%d-per-line.jsonl", perLine))
		gen := exec.Command(os.Args[0], "-write", path, "-units", fmt.Sprint(*units), "-per-line", fmt.Sprint(perLine), fmt.Sprintf("-semconv=%v", *semconv))
		gen.Stdout, gen.Stderr = os.Stderr, os.Stderr
		if err := gen.Run(); err != nil {
			fail(fmt.Errorf("write %s: %w", path, err))
		}
		st, err := os.Stat(path)
		if err != nil {
			fail(err)
		}
		size := st.Size()
		cmd := exec.Command(bin, "report", path)
		cmd.Stdout, cmd.Stderr = nil, os.Stderr
		start := time.Now()
		if err := cmd.Run(); err != nil {
			fail(fmt.Errorf("amdahl report: %w", err))
		}
		wall := time.Since(start)
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		fmt.Printf("%d spans, %d lines (%.0f MB): wall %.2fs  user %.2fs  peak RSS %d MB\n",
			10**units, (*units+perLine-1)/perLine, float64(size)/1e6, wall.Seconds(),
			time.Duration(ru.Utime.Nano()).Seconds(), ru.Maxrss/1024)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "report1m:", err)
	os.Exit(1)
}

// write writes units units of work, perLine units per line, as OTLP JSON.
func write(path string, units, perLine int) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	const res = `{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"amdahl"}},{"key":"process.pid","value":{"intValue":"4242"}}]},"scopeSpans":[{"scope":{"name":"github.com/amdahl-rt/amdahl"},"spans":[`
	base := int64(1_700_000_000_000_000_000)
	for u := 0; u < units; u++ {
		if u%perLine == 0 {
			w.WriteString(`{"resourceSpans":[` + res)
		} else {
			w.WriteByte(',')
		}
		trace := fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
		t := base + int64(u)*2_000_000
		id := func(i int) string { return fmt.Sprintf("%014x%02x", u+1, i) }
		d := func(mean int64) int64 { return mean/2 + rng.Int64N(mean) }
		type span struct {
			name, comp, phase, dir string
			parent                 int
			start, end             int64
			remote                 bool
		}
		disp := t + d(600_000)
		ser := disp + d(30_000)
		send := ser + d(50_000)
		frecv := send + d(20_000)
		fdes := frecv + d(40_000)
		fexec := fdes + d(100_000)
		fser := fexec + d(10_000)
		recv := fser + d(20_000)
		des := recv + d(30_000)
		end := des + d(300_000)
		spans := []span{
			{"amdahl.work", "", "", "", -1, t, end, false},
			{"runtime.dispatch", "runtime", "dispatch", "", 0, t, disp, false},
			{"runtime.host", "", "", "", 0, disp, des, false},
			{"ipc.serialize", "ipc", "serialize", "request", 2, disp, ser, false},
			{"ipc.send", "ipc", "send", "request", 2, ser, send, false},
			{"taskhost.receive", "taskhost", "receive", "request", 2, send, frecv, true},
			{"taskhost.deserialize", "taskhost", "deserialize", "request", 2, frecv, fdes, true},
			{"taskhost.execute", "taskhost", "execute", "", 2, fdes, fexec, true},
			{"ipc.receive", "ipc", "receive", "reply", 2, fser, recv, false},
			{"chunking.send", "chunking", "send", "request", 0, des, end, false},
		}
		for i, s := range spans {
			if i > 0 {
				w.WriteByte(',')
			}
			parent := ""
			if s.parent >= 0 {
				parent = id(s.parent)
			}
			fmt.Fprintf(w, `{"traceId":"%s","spanId":"%s","parentSpanId":"%s","name":"%s","kind":1,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[`,
				trace, id(i), parent, s.name, s.start, s.end)
			attrs := [][2]string{{"amdahl.scenario", "taskhost"}, {"amdahl.variant", "baseline"}, {"amdahl.transport", "ipc"}}
			if s.comp != "" {
				attrs = append(attrs, [2]string{"amdahl.component", s.comp}, [2]string{"amdahl.phase", s.phase})
			}
			if s.dir != "" {
				attrs = append(attrs, [2]string{"amdahl.direction", s.dir})
			}
			if i == 0 {
				attrs = append(attrs, [2]string{"amdahl.outcome", "ok"})
			}
			for j, a := range attrs {
				if j > 0 {
					w.WriteByte(',')
				}
				fmt.Fprintf(w, `{"key":"%s","value":{"stringValue":"%s"}}`, a[0], a[1])
			}
			if s.remote {
				w.WriteString(`,{"key":"amdahl.remote","value":{"boolValue":true}}`)
			}
			w.WriteString(`],"status":{}}`)
		}
		if u%perLine == perLine-1 || u == units-1 {
			w.WriteString("]}]}]}\n")
		}
	}
	return finish(f, w)
}

// writeSemconv writes units units of work of three services (frontend,
// cart, db) as otelhttp and otelgrpc record them, perLine units per line,
// each line one request with a ResourceSpans per service.
func writeSemconv(path string, units, perLine int) (int64, error) {
	f, err := os.Create(path)
	if err != nil {
		return 0, err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	services := []string{"frontend", "cart", "db"}
	var bufs [3]bytes.Buffer
	base := int64(1_700_000_000_000_000_000)
	for u := 0; u < units; u++ {
		trace := fmt.Sprintf("%016x%016x", rng.Uint64(), rng.Uint64())
		t := base + int64(u)*20_000_000
		id := func(i int) string { return fmt.Sprintf("%014x%02x", u+1, i) }
		d := func(mean int64) int64 { return mean/2 + rng.Int64N(mean) }
		type span struct {
			svc        int
			name       string
			kind       int
			parent     int
			start, end int64
			attrs      string
		}
		spans := []span{{0, "GET /checkout", 2, -1, t, 0, `{"key":"http.request.method","value":{"stringValue":"GET"}},{"key":"http.route","value":{"stringValue":"/checkout"}},{"key":"url.path","value":{"stringValue":"/checkout"}},{"key":"http.response.status_code","value":{"intValue":"200"}}`}}
		at := t + d(100_000)
		end := at
		for i := range 3 {
			c := at + d(20_000)
			s0 := c + d(50_000)
			s1 := s0 + d(2_000_000)
			c1 := s1 + d(50_000)
			spans = append(spans,
				span{0, "HTTP GET", 3, 0, c, c1, `{"key":"http.request.method","value":{"stringValue":"GET"}},{"key":"server.address","value":{"stringValue":"cart"}},{"key":"server.port","value":{"intValue":"8080"}},{"key":"url.full","value":{"stringValue":"http://cart:8080/item/` + fmt.Sprint(i) + `"}},{"key":"http.response.status_code","value":{"intValue":"200"}}`},
				span{1, "GET /item/{id}", 2, len(spans), s0, s1, `{"key":"http.request.method","value":{"stringValue":"GET"}},{"key":"http.route","value":{"stringValue":"/item/{id}"}},{"key":"url.path","value":{"stringValue":"/item/` + fmt.Sprint(i) + `"}},{"key":"http.response.status_code","value":{"intValue":"200"}}`})
			end = max(end, c1)
		}
		g := end + d(20_000)
		g0 := g + d(50_000)
		g1 := g0 + d(4_000_000)
		g2 := g1 + d(50_000)
		rpc := `{"key":"rpc.system.name","value":{"stringValue":"grpc"}},{"key":"rpc.method","value":{"stringValue":"shop.Orders/Get"}},{"key":"rpc.response.status_code","value":{"stringValue":"OK"}}`
		spans = append(spans,
			span{0, "shop.Orders/Get", 3, 0, g, g2, rpc + `,{"key":"server.address","value":{"stringValue":"db"}}`},
			span{2, "shop.Orders/Get", 2, len(spans), g0, g1, rpc},
			span{0, "render", 1, 0, g2, g2 + d(300_000), ""})
		spans[0].end = spans[len(spans)-1].end + d(50_000)
		for i, s := range spans {
			b := &bufs[s.svc]
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			parent := ""
			if s.parent >= 0 {
				parent = id(s.parent)
			}
			fmt.Fprintf(b, `{"traceId":"%s","spanId":"%s","parentSpanId":"%s","flags":256,"name":"%s","kind":%d,"startTimeUnixNano":"%d","endTimeUnixNano":"%d","attributes":[%s],"status":{}}`,
				trace, id(i), parent, s.name, s.kind, s.start, s.end, s.attrs)
		}
		if u%perLine == perLine-1 || u == units-1 {
			w.WriteString(`{"resourceSpans":[`)
			for i, svc := range services {
				if i > 0 {
					w.WriteByte(',')
				}
				fmt.Fprintf(w, `{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"%s"}},{"key":"service.instance.id","value":{"stringValue":"%s-1"}}]},"scopeSpans":[{"scope":{"name":"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp","version":"0.72.0"},"spans":[`, svc, svc)
				w.Write(bufs[i].Bytes())
				w.WriteString(`]}]}`)
				bufs[i].Reset()
			}
			w.WriteString("]}\n")
		}
	}
	return finish(f, w)
}

// finish flushes w to f, closes f and returns the file's size.
func finish(f *os.File, w *bufio.Writer) (int64, error) {
	if err := w.Flush(); err != nil {
		f.Close()
		return 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return 0, err
	}
	return st.Size(), f.Close()
}
