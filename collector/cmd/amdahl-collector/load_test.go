package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/amdahl-rt/amdahl/collector/internal/otlpfile"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// loadEnv turns TestLoad on: "RATE,DURATION", spans per second and how
// long ("100000,60s"). It is a measurement, not a check CI runs:
// docs/measurements/ keeps what it printed. With heapProfileEnv set to a
// directory, the collector also writes heap profiles there.
const loadEnv = "AMDAHL_COLLECTOR_LOAD"

// TestLoad sends the recorded run's spans, with fresh trace ids on every
// pass, to amdahl-collector (its default pipeline: memory_limiter, the
// connector, Prometheus) at a fixed rate over OTLP gRPC, and samples the
// collector's RSS every second, and every 5 s its Go heap and the
// connector's buffer from its own metrics. No span may be refused,
// dropped or late.
func TestLoad(t *testing.T) {
	spec := os.Getenv(loadEnv)
	if spec == "" {
		t.Skipf("set %s=RATE,DURATION (e.g. 100000,60s) to run the load measurement", loadEnv)
	}
	rateS, durS, _ := strings.Cut(spec, ",")
	rate, err := strconv.Atoi(rateS)
	if err != nil || rate <= 0 {
		t.Fatalf("%s: rate %q: want spans per second", loadEnv, rateS)
	}
	dur, err := time.ParseDuration(durS)
	if err != nil || dur <= 0 {
		t.Fatalf("%s: duration %q: want e.g. 60s", loadEnv, durS)
	}
	otlp := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	prom := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	self := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	selfHost, selfPort, _ := strings.Cut(self, ":")
	col := startCollector(t, "amdahl-collector", strings.NewReplacer("127.0.0.1:4317", otlp, "127.0.0.1:8889", prom,
		"host: 127.0.0.1\n                port: 8888", "host: "+selfHost+"\n                port: "+selfPort).Replace(defaultConfig))
	waitListening(t, col, otlp)
	waitListening(t, col, self)

	input := readRecorded(t)
	var perPass int
	for _, td := range input {
		perPass += td.SpanCount()
	}
	cc, err := grpc.NewClient(otlp, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	client := ptraceotlp.NewGRPCClient(cc)

	start := time.Now()
	var sent, refused int
	var gen uint32
	type rssAt struct {
		at   time.Duration
		kib  int
		self string // the heap and the buffer, every 5 s
	}
	var rss []rssAt
	nextSample := time.Duration(0)
	for time.Since(start) < dur {
		elapsed := time.Since(start)
		if elapsed >= nextSample {
			r := rssAt{at: elapsed.Round(time.Second), kib: rssKiB(t, col.cmd.Process.Pid)}
			if nextSample%(5*time.Second) == 0 {
				r.self = memory(t, "http://"+self+"/metrics")
			}
			rss = append(rss, r)
			nextSample += time.Second
		}
		if sent > int(elapsed.Seconds()*float64(rate)) {
			time.Sleep(2 * time.Millisecond)
			continue
		}
		gen++
		for _, td := range input {
			otlpfile.Retrace(td, gen)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
			cancel()
			if err != nil {
				refused += td.SpanCount()
				continue
			}
			sent += td.SpanCount()
		}
	}
	took := time.Since(start)
	time.Sleep(8 * time.Second) // the connector's wait (6s) and a flush
	metrics := scrape(t, "http://"+self+"/metrics")
	var lines []string
	for _, r := range rss {
		lines = append(lines, fmt.Sprintf("%5v %7.1f MiB  %s", r.at, float64(r.kib)/1024, r.self))
	}
	t.Logf("sent %d spans in %v (%.0f spans/s; %d a pass), %d refused by the receiver; collector RSS:\n%s\nconnector: %s",
		sent, took.Round(time.Millisecond), float64(sent)/took.Seconds(), perPass, refused, strings.Join(lines, "\n"), metrics)
	if refused > 0 {
		t.Errorf("%d spans refused at the receiver (memory_limiter)", refused)
	}
	for _, bad := range []string{"otelcol_connector_amdahl_spans_refused", "otelcol_connector_amdahl_traces_evicted", "otelcol_connector_amdahl_spans_late"} {
		if strings.Contains(metrics, bad) {
			t.Errorf("the connector counted %s", bad)
		}
	}
}

// rssKiB is VmRSS of process pid.
func rssKiB(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// scrape returns the connector's own metrics lines at url.
func scrape(t *testing.T, url string) string {
	t.Helper()
	res, err := promText(url)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, l := range strings.Split(res, "\n") {
		if strings.HasPrefix(l, "otelcol_connector_amdahl_") || strings.HasPrefix(l, "otelcol_receiver_refused_spans") ||
			strings.HasPrefix(l, "otelcol_receiver_accepted_spans") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "; ")
}

// memory returns the collector's Go heap (allocated, and obtained from
// the OS) and the connector's buffer, from its own metrics at url.
func memory(t *testing.T, url string) string {
	t.Helper()
	res, err := promText(url)
	if err != nil {
		t.Fatal(err)
	}
	val := map[string]float64{}
	for _, l := range strings.Split(res, "\n") {
		name, v, ok := strings.Cut(l, " ")
		if !ok || strings.HasPrefix(l, "#") {
			continue
		}
		name, _, _ = strings.Cut(name, "{")
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			val[name] += f
		}
	}
	const mib = 1 << 20
	return fmt.Sprintf("heap %5.1f MiB, sys %5.1f MiB; open %6.0f traces, %7.0f spans, %5.1f MiB accounted",
		val["otelcol_process_runtime_heap_alloc_bytes"]/mib, val["otelcol_process_runtime_total_sys_memory_bytes"]/mib,
		val["otelcol_connector_amdahl_traces_open"], val["otelcol_connector_amdahl_spans_buffered"],
		val["otelcol_connector_amdahl_bytes_buffered"]/mib)
}
